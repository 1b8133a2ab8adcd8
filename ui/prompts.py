"""Prompt boxes: text that never fails to tokenize, token ids written into a box, and lone surrogates."""
from __future__ import annotations

import re

import streamlit as st

from core.nn.tokenizer import Prompt

IDS_SUFFIX = "__ids"  # session key beside a prompt box's: (text, ids) a page wrote into the box as token ids


def set_prompt_ids(key: str, tokenizer, ids: list[int]):
    """Fill the prompt box ``key`` with token ids (in a button's callback): the box shows their text, and as
    long as that text is not edited the page reads these very ids, not the text encoded again."""
    text = tokenizer.decode(ids)
    st.session_state[key] = text
    st.session_state[key + IDS_SUFFIX] = (text, [int(i) for i in ids], _vocab_tag(tokenizer))


def _vocab_tag(tokenizer) -> int:
    """Tells tokenizers apart: ids written for one model mean other tokens to another."""
    return hash((tokenizer.kind, tokenizer.pieces))


def prompt_ids_now(key: str, tokenizer) -> list[int]:
    """The ids the prompt box ``key`` stands for right now, as ``prompt_input`` reads them (for a button's callback,
    which runs before the page and may see text typed since the last run): ids written by ``set_prompt_ids`` while
    the box still shows their text, else the text encoded."""
    text = st.session_state.get(key, "") or ""
    written = st.session_state.get(key + IDS_SUFFIX)
    if written and written[0] == text and written[2] == _vocab_tag(tokenizer):  # unedited, and for this model
        return list(written[1])
    return tokenizer.encode(text, errors="drop")


def prompt_input(label: str, default: str, key: str, tokenizer, n_ctx: int, height: int = 100):
    """A prompt box that never fails: returns a core.nn.tokenizer.Prompt after showing its warnings.
    Callers check ``prompt.empty`` and show a hint instead of a chart. Ids written by ``set_prompt_ids`` are
    used while the box still shows their text."""
    text = st.text_area(label, value=default, key=key, height=height, max_chars=10_000)
    if REPLACED in (text or ""):  # accept_lone_surrogates wrote it, or the text held one
        st.warning(f"Some characters of this text could not be read (half of an emoji or another character outside "
                   f"the basic range, pasted alone) and show as {REPLACED}.", icon="⚠️")
    written = st.session_state.get(key + IDS_SUFFIX)
    if written and written[0] == text and written[2] == _vocab_tag(tokenizer):
        prompt = Prompt.of_ids(tokenizer, written[1], n_ctx)  # exactly the ids a button wrote
    else:  # edited since (or never written): the ids no longer stand for the box
        st.session_state.pop(key + IDS_SUFFIX, None)
        prompt = Prompt(tokenizer, text, n_ctx)
    for message in prompt.messages(n_ctx):
        st.warning(message, icon="⚠️")
    if prompt.failure:
        entry = st.session_state.get("te_current", (None,))[0]
        st.error(f"The tokenizer of **{entry.name if entry else 'this model'}** failed on this text, so nothing below "
                 "can be computed from it. Change the text, or pick another model.", icon="⚠️")
    return prompt


# ------------------------------------------------------------------ the protocol: lone surrogates
# A browser sends the text of a box as UTF-8, but a lone half of a surrogate pair (an emoji cut in two, say) goes
# out as three bytes ED A0-BF 80-BF, which is not UTF-8. The server then cannot parse the message, closes the
# socket (1002) and the browser silently drops the edit. Those three bytes are replaced by U+FFFD's own three
# (EF BF BD): the same length, so every protobuf length around them stays right, and the page warns (prompt_input).
REPLACED = "\ufffd"
_SURROGATE = re.compile(rb"\xed[\xa0-\xbf][\x80-\xbf]")


def repair_surrogates(data: bytes) -> bytes:
    """``data`` with every UTF-8-encoded surrogate replaced by the UTF-8 of U+FFFD (same length)."""
    return _SURROGATE.sub("\ufffd".encode("utf-8"), data)


def accept_lone_surrogates() -> bool:
    """Make the server's websocket repair a message it could not parse because of a lone surrogate (see above),
    instead of closing the connection. Installed once per process (app.py); only messages that hold such bytes
    and fail to parse are touched. False when this Streamlit has no such websocket to repair (nothing done)."""
    try:
        # local: Streamlit's runtime internals, there only inside a running app
        from starlette.websockets import WebSocket
        from streamlit.proto.BackMsg_pb2 import BackMsg
    except ImportError:
        return False
    original = WebSocket.receive_bytes
    if getattr(original, "_te_repairs", False):  # app.py runs on every rerun: patch once, never wrap twice
        return True

    async def receive_bytes(self):
        data = await original(self)
        if b"\xed" in data and _SURROGATE.search(data):  # a cheap byte test before the regex and the parse
            try:
                BackMsg().ParseFromString(data)
            except Exception:  # noqa: BLE001 - the parse error the server would close the socket on
                data = repair_surrogates(data)
        return data

    receive_bytes._te_repairs = True
    WebSocket.receive_bytes = receive_bytes
    return True
