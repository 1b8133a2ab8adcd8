"""UI glue shared by app.py and the pages: model discovery, cached loading, the current selection."""
from __future__ import annotations

import collections
import inspect
import re
import secrets
import threading
from pathlib import Path

import pandas  # noqa: F401  imported up front: Streamlit imports it lazily, and sessions racing on that
import streamlit as st  # first import could see a half-initialised module (seen under classroom load)
import plotly.graph_objects as go
from _plotly_utils.utils import convert_to_base64
from streamlit.errors import StreamlitAPIException

from core.checkpoint import CheckpointError, ModelEntry, discover_models, load_checkpoint, read_config
from core.folder_files import lstamp
from core.gate import Gate, GateFull, gate_slots
from core.paths import user_models_dir  # TE_MODELS_DIR is read in core (the corpus lookup needs it too)
from core.threads import page_threads, use_threads

ROOT = Path(__file__).resolve().parent
SHIPPED_DIR = ROOT / "assets" / "models"
DEFAULT_MODEL = "shakespeare-char"


use_threads(page_threads())  # see core.threads: one thread per page run unless TE_TORCH_THREADS says otherwise


def _stamp(path: Path) -> int:
    """Changes whenever the checkpoint is rewritten, so the cache reloads a retrained model (links are read for
    what they are, never followed: core.folder_files.lstamp)."""
    try:
        return hash(lstamp(path))
    except OSError:
        return 0


# a few models at once: each costs its weights in float32 (the shipped ones 1 MB, a GPT-2 small 0.5 GB), and a
# class saving models would otherwise keep sixteen of them (measured: 34 MB more per save of a d=256 model)
@st.cache_resource(show_spinner="Loading model ...", max_entries=6)
def _load(path: str, stamp: int):
    """((model, tokenizer), None), or (None, the CheckpointError): a refusal is kept like a model, for as long
    as the folder does not change, so that a model with NaN weights is not read again on every rerun."""
    try:
        return load_checkpoint(path), None  # the model is in eval mode with gradients off; never mutate it
    except CheckpointError as e:
        return None, e


@st.cache_resource
def compute_gate(lane: str = "short") -> Gate | None:
    """The server's gates of page work (core.gate), one per lane. "short": a page's analysis of a new prompt
    (a few hundred ms), as many at once as cores. "long": generating text (seconds), one fewer: with a single
    line, a quick attention rerun waited behind every text being generated (measured: attention p50 8 -> 15 s
    with 30 students), so long work never takes every core."""
    slots = gate_slots()
    if not slots:
        return None
    return Gate(slots if lane == "short" else max(1, slots - 1))


@st.cache_resource
def _computed() -> dict:
    """Keys of page work this server has finished (``work_finished``), newest last: a bounded LRU. Nothing is put
    here when a slot is taken, only once the work is done: work interrupted by a rerun takes a slot again."""
    return {"lock": threading.Lock(), "keys": collections.OrderedDict()}


def compute_slot(what: str, key=None, lane: str = "short"):
    """Wait for a compute slot before the heavy part of a page (once per page run; the slot is given back by
    ``release_compute_slot`` in app.py when the page's run ends). While the line is long, say so.

    ``key``: work that ``work_finished(key)`` has recorded skips the line. Pages whose heavy work is a cached
    function use ``gated`` instead, which asks the cache's own contents. A second session asking for work under
    way waits for the first one's result (Streamlit's cache lock), holding no slot."""
    gate = compute_gate(lane)
    if gate is None or gate.held():
        return
    if key is not None:
        known = _computed()
        with known["lock"]:
            if key in known["keys"]:
                known["keys"].move_to_end(key)
                return
    box = st.empty()

    def told(ahead: int):
        line = "you are next" if ahead == 0 else f"{ahead} ahead of you"
        at_once = "one page at a time" if gate.slots == 1 else f"{gate.slots} pages at a time"
        box.info(f"**Queued: {line}.** The server is busy: it computes {at_once}, in order of arrival, and "
                 f"{what} starts as soon as a slot is free.", icon=":material/hourglass_top:")

    try:
        gate.acquire(on_wait=told)
    except GateFull:
        box.error("The server is saturated: too many pages are waiting to be computed. Try again in a moment.",
                  icon="⚠️")
        st.stop()
    box.empty()


def work_finished(key, entries: int = 4096) -> None:
    """Record that the work ``key`` names is done and its results are cached (at most ``entries`` keys kept)."""
    known = _computed()
    with known["lock"]:
        known["keys"][key] = True
        known["keys"].move_to_end(key)
        while len(known["keys"]) > entries:
            known["keys"].popitem(last=False)


_GATED: dict = {}
_GATED_LOCK = threading.Lock()


def gated(cached, what: str, lane: str = "short"):
    """``cached`` (a page's st.cache_data / st.cache_resource function with ``max_entries``) behind the compute line:
    a call whose result is in the cache runs at once; any other takes a slot first (``compute_slot``).

    Whether a result is in the cache is known from an LRU of the argument tuples whose calls have *returned*, as
    long as the cache and touched in the same order: every call of the function goes through here, so the two hold
    the same keys and evict the same ones. A call interrupted by a rerun, or one the cache has since evicted, takes
    a slot again (a registry of keys recorded when a slot was taken, 4,096 of them, had let both skip the line).
    The LRU is the server's, one per cached function (Streamlit's own key for it, stable across reruns); the
    wrapper calls this run's ``cached``, which sees this run's model."""
    fkey = getattr(cached, "_function_key", None) or id(cached)
    with _GATED_LOCK:
        if fkey not in _GATED:
            _GATED[fkey] = (collections.OrderedDict(), threading.Lock())
        seen, lock = _GATED[fkey]
    size = _max_entries(cached)

    def call(*args):
        with lock:
            hit = args in seen
        if not hit:
            compute_slot(what, lane=lane)
        out = cached(*args)
        with lock:
            seen[args] = True
            seen.move_to_end(args)
            while len(seen) > size:
                seen.popitem(last=False)
        return out

    call.seen = seen  # for tests
    return call


def _max_entries(cached) -> int:
    """The ``max_entries`` a Streamlit cache function was made with (its wrapper keeps its info); 1 when unknown,
    so that at worst every call but an immediate repeat takes a slot."""
    info = getattr(cached, "_info", None)
    n = getattr(info, "max_entries", None)
    return int(n) if isinstance(n, int) and n > 0 else 1


def release_compute_slot():
    """Give back the compute slot this page run holds, if any (app.py calls it however the page's run ended)."""
    for lane in ("short", "long"):
        gate = compute_gate(lane)
        if gate is not None:
            gate.release()


def shipped_names() -> list[str]:
    """Names no user model may take: the shipped models' folders."""
    return [p.name for p in SHIPPED_DIR.iterdir() if p.is_dir()] if SHIPPED_DIR.is_dir() else []


def model_key(entry: ModelEntry) -> str:
    """Names a model's current weights, for caches: it changes when the checkpoint is rewritten."""
    return f"{entry.path}:{_stamp(entry.path)}"


def load_model(entry: ModelEntry):
    """(model, tokenizer) for an entry; raises CheckpointError."""
    loaded, error = _load(str(entry.path), _stamp(entry.path))
    if error is not None:
        raise error
    return loaded


def scan_models() -> tuple[list[ModelEntry], list[ModelEntry]]:
    """(loadable, broken): every model folder is checked (config and weight header, not the weights), a
    broken one never hides the others. Only the model picked in the sidebar is loaded."""
    good, bad = [], []
    for entry in discover_models(SHIPPED_DIR, user_models_dir()):
        (bad if entry.error else good).append(entry)
    return good, bad


# Streamlit and the pages/ folder. A folder named pages/ beside the entry script makes Streamlit start in
# its legacy multipage mode: until some session calls st.navigation, a request runs the page script its
# URL names alone (no app.py, so no sidebar picker), with a sidebar menu of every file in pages/. The
# first st.navigation call (app.py's) ends that mode for the whole server. Three supported pieces keep
# a cold server's first request, a bookmark to /attention say, inside the frame:
# - pages/ holds page scripts only (the helpers live here, in ui.py), so the legacy menu lists no helper;
# - .streamlit/config.toml sets client.showSidebarNavigation = false, which hides the legacy menu, and
#   app.py calls show_page_menu() before st.navigation, so our own menu shows all the same;
# - every page calls ensure_frame() first: run alone, it switches to app.py, which calls st.navigation
#   and then resume_deep_link() to switch back to that page, now in the frame.
PAGES_DIR = ROOT / "pages"
_DEEP_LINK = "te_deep_link"  # session key: the page a request opened before app.py had run (a bookmark)


def _calling_page() -> str | None:
    """The page script (as "pages/name.py") whose run called us, found on the call stack."""
    frame = inspect.currentframe().f_back
    while frame is not None:
        file = frame.f_globals.get("__file__")
        if file and Path(file).resolve().parent == PAGES_DIR:
            return Path(file).resolve().relative_to(ROOT).as_posix()
        frame = frame.f_back
    return None


def ensure_frame():
    """Make sure this page runs inside app.py's frame (router, sidebar, model picker).

    A page runs without the frame only in Streamlit's legacy pages/ mode, i.e. when the very first
    request after a server start opens the page's URL (a bookmark). Then we remember the page and switch
    to app.py (the legacy app's main page); app.py's st.navigation ends the legacy mode for the whole
    server, and resume_deep_link() switches on to the remembered page. Every page calls this first,
    before it draws anything."""
    if "te_current" in st.session_state:
        return
    page = _calling_page()
    tries = st.session_state.get("te_frame_switches", 0)
    if page is None or tries >= 2:  # never loop: past two tries the page runs without the frame
        return
    st.session_state["te_frame_switches"] = tries + 1
    st.session_state[_DEEP_LINK] = (page, st.query_params.to_dict())
    st.switch_page("app.py")


def resume_deep_link():
    """Called by app.py right after st.navigation: if a page sent us here (ensure_frame), go back to it,
    now inside the frame. A page that st.navigation does not list is dropped (the app stays on Home)."""
    page, query = st.session_state.pop(_DEEP_LINK, (None, None))
    if page is None:
        return
    try:
        st.switch_page(page, query_params=query or None)
    except StreamlitAPIException:  # not one of app.py's pages
        pass


def show_page_menu():
    """Let app.py's st.navigation show its sidebar menu. config.toml sets client.showSidebarNavigation to
    false to hide the menu of Streamlit's legacy pages/ folder mode; Streamlit applies that option to
    st.navigation's sidebar menu too, so app.py turns it back on before calling st.navigation. The option
    is process-wide, which is what we want: that first st.navigation ends the legacy mode for good."""
    if st.get_option("client.showSidebarNavigation") is False:
        st.set_option("client.showSidebarNavigation", True)


def current():
    """(entry, model, tokenizer) of the model picked in the sidebar, or (None, None, None)."""
    ensure_frame()
    return st.session_state.get("te_current", (None, None, None))


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
    if written and written[0] == text and written[2] == _vocab_tag(tokenizer):
        return list(written[1])
    return tokenizer.encode(text, errors="drop")


def prompt_input(label: str, default: str, key: str, tokenizer, n_ctx: int, height: int = 100):
    """A prompt box that never fails: returns a core.tokenizer.Prompt after showing its warnings.
    Callers check ``prompt.empty`` and show a hint instead of a chart. Ids written by ``set_prompt_ids`` are
    used while the box still shows their text."""
    from core.tokenizer import Prompt

    text = st.text_area(label, value=default, key=key, height=height, max_chars=10_000)
    if REPLACED in (text or ""):  # accept_lone_surrogates wrote it, or the text held one
        st.warning(f"Some characters of this text could not be read (half of an emoji or another character outside "
                   f"the basic range, pasted alone) and show as {REPLACED}.", icon="⚠️")
    written = st.session_state.get(key + IDS_SUFFIX)
    if written and written[0] == text and written[2] == _vocab_tag(tokenizer):
        prompt = Prompt.of_ids(tokenizer, written[1], n_ctx)  # exactly the ids a button wrote
    else:
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
        from starlette.websockets import WebSocket
        from streamlit.proto.BackMsg_pb2 import BackMsg
    except ImportError:
        return False
    original = WebSocket.receive_bytes
    if getattr(original, "_te_repairs", False):
        return True

    async def receive_bytes(self):
        data = await original(self)
        if b"\xed" in data and _SURROGATE.search(data):
            try:
                BackMsg().ParseFromString(data)
            except Exception:  # noqa: BLE001 - the parse error the server would close the socket on
                data = repair_surrogates(data)
        return data

    receive_bytes._te_repairs = True
    WebSocket.receive_bytes = receive_bytes
    return True


def require_model(why: str = "") -> tuple:
    """(entry, model, tokenizer) of the selected model, or stop the page with a message (``why`` says what
    the page would have shown)."""
    entry, model, tok = current()
    if model is None:
        st.info(f"No model is loaded{why}. Pick one in the sidebar (or see there why none could be loaded).")
        st.stop()
    return entry, model, tok


def session_owner() -> str:
    """This browser session's identity: a random id kept for the session (no login). A saved model records
    it, so everyone sees every model but only its owner may replace it."""
    return st.session_state.setdefault("te_owner", secrets.token_hex(8))


def upload_limit_mb() -> int:
    """The server's upload cap in MiB (``server.maxUploadSize``, set once in .streamlit/config.toml)."""
    return int(st.get_option("server.maxUploadSize"))


def model_label(entry: ModelEntry, me: str) -> str:
    """How the picker names a model: shipped, yours (saved by the session ``me``) or a classmate's."""
    if entry.shipped:
        return entry.name
    return f"{entry.name} ({'yours' if entry.owner == me else 'a classmate’s'})"


def shipped_config():
    """(config, training metadata) of the shipped default model, read from its folder (no weights); with a
    warning on the page and (None, {}) when that folder is broken, so a page never crashes on it."""
    try:
        config, _, training = read_config(SHIPPED_DIR / DEFAULT_MODEL)
    except CheckpointError as e:
        st.warning(f"The shipped model's configuration could not be read: {e}", icon="⚠️")
        return None, {}
    return config, training


def offer_shakespeare_fetch(key: str) -> bool:
    """Where Tiny Shakespeare was looked for, where to put it by hand, and a button that fetches it: from its
    public source, on this click only, checked against its SHA-256 and saved in the corpora folder beside the
    models (core.fetch). True once it is saved: the caller reruns, and shakespeare_path() finds it from then
    on. Any failure is shown with the same where-to-put-it advice."""
    from core import fetch  # read at call time: tests point fetch.SHAKESPEARE at a local server
    from core.corpus import CORPUS_ENV, fetched_shakespeare_path, shakespeare_candidates

    source, dest = fetch.SHAKESPEARE, fetched_shakespeare_path()
    by_hand = f"save {source.url} as `{dest}` yourself, or set the {CORPUS_ENV} environment variable to the file's path"
    looked = " and ".join(f"`{p}`" for p in shakespeare_candidates())
    st.caption(f"{source.name} was not found (looked for {looked}). Fetch it with the button, or {by_hand}.")
    if not st.button(f"Fetch {source.name} ({source.size_label})", key=key, icon=":material/download:",
                     help=f"Downloads {source.url} once, checks its SHA-256 and saves it in {dest.parent}."):
        return False
    with st.spinner(f"Fetching {source.name} ..."):
        try:
            fetch.fetch_corpus(source.url, dest, source.sha256, timeout=60, max_bytes=source.size)
        except fetch.FetchError as e:
            st.error(f"{source.name} could not be fetched: {e}. Instead, {by_hand}.", icon="⚠️")
            return False
    return True


def job_controls(job, s, polling: bool, prefix: str, busy: type[Exception], resume_help: str | None = None,
                 stop_help: str | None = None) -> None:
    """Pause, Resume and Stop for a background job (a training run, a study) whose status is ``s``; each click
    reruns the page. Also reruns when the job started, paused or ended between two polls, so that the controls
    and the polling match its state. ``busy``: the error a resume raises when the server is full."""
    b1, b2, b3, _ = st.columns([1, 1, 1, 4])
    if b1.button("Pause", key=f"{prefix}_pause", disabled=not s.can_pause):
        job.pause()
        st.rerun()
    if b2.button("Resume", key=f"{prefix}_resume", disabled=not s.can_resume, help=resume_help):
        try:
            job.resume()
        except busy as e:
            st.error(str(e), icon="⚠️")
        else:
            st.rerun()
    if b3.button("Stop", key=f"{prefix}_stop", disabled=not s.can_stop, help=stop_help):
        job.stop(wait=None)  # the worker ends what is under way; the polling shows when it has
        st.rerun()
    if s.moving != polling:
        st.rerun()


# ------------------------------------------------------------------ drawing figures
class _Encoded(go.Figure):
    """A figure already in the form st.plotly_chart encodes (BaseFigure.to_dict's: arrays as base64 typed arrays,
    plain dicts and lists). st.plotly_chart asks a figure for ``to_dict()``, which deep-copies every value, arrays
    included, before converting them; this one hands over the finished dict. The JSON sent is the same text
    (tests/test_shared_chart.py)."""

    def __init__(self, spec: dict):
        super().__init__()
        self._te_spec = spec

    def to_dict(self):
        return self._te_spec


def _containers(obj):
    """New dicts and lists all the way down, the values in them shared (arrays are not copied)."""
    if isinstance(obj, dict):
        return {k: _containers(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_containers(v) for v in obj]
    return obj


def encoded(fig: go.Figure) -> _Encoded:
    """``fig`` as BaseFigure.to_dict gives it, without copying its arrays: new containers, then Plotly's own
    conversion of arrays to base64 (which writes into the containers, never into the figure)."""
    spec = {"data": _containers(fig._data), "layout": _containers(fig._layout)}
    frames = [f._props for f in fig._frame_objs]
    if frames:
        spec["frames"] = _containers(frames)
    convert_to_base64(spec)
    return _Encoded(spec)


def chart(fig, where=None, **kwargs):
    """st.plotly_chart (in the container ``where``, default the page), sending ``fig`` without the deep copy
    Streamlit makes of it (``encoded``)."""
    return (where or st).plotly_chart(encoded(fig) if isinstance(fig, go.Figure) else fig, **kwargs)


_FIGURE_CACHES: dict = {}
_FIGURE_CACHES_LOCK = threading.Lock()


def cached_figure(builder):
    """``builder`` (a core figure function) behind one st.cache_resource for the server: a rerun with the same
    inputs gets the same figure object (cache_data would pickle it, and unpickling a Plotly figure validates it
    again). The wrapper is made once per process: Streamlit reads a function's source to name its cache whenever
    a wrapper is made, which a page doing it at its top paid on every run (about 2 ms a function)."""
    with _FIGURE_CACHES_LOCK:
        if builder not in _FIGURE_CACHES:
            _FIGURE_CACHES[builder] = st.cache_resource(builder, max_entries=32, show_spinner=False)
        return _FIGURE_CACHES[builder]


def shared_chart(fig, **kwargs):
    """``chart`` for a figure from one of the pages' figure caches (st.cache_resource: one object, shared by every
    session and never changed): its encoded form is kept with it, so a class opening the Attention page encodes
    each figure once, not once per student. Never for a figure that is changed after it is drawn."""
    enc = getattr(fig, "_te_encoded", None)
    if enc is None:
        enc = fig._te_encoded = encoded(fig)
    return st.plotly_chart(enc, **kwargs)


# ------------------------------------------------------------------ whose background runs are still wanted
def session_id() -> str | None:
    """This browser session's id in Streamlit's runtime (None outside a script run). Core keeps it as an opaque
    string and asks ``session_alive`` about it."""
    from streamlit.runtime.scriptrunner import get_script_run_ctx
    ctx = get_script_run_ctx()
    return ctx.session_id if ctx is not None else None


def session_alive(session: str) -> bool:
    """False once Streamlit has forgotten the session ``session``: its tab was closed (or reloaded) and the two
    minutes in which it could reconnect have passed, so no one can reach its state again. True while it is
    connected or may still reconnect, and whenever it cannot be told (no server runtime, as under AppTest).
    Streamlit's session manager is not public API: should it change, every session counts as alive."""
    from streamlit import runtime
    if not runtime.exists():
        return True
    info = getattr(getattr(runtime.get_instance(), "_session_mgr", None), "get_session_info", None)
    return info is None or info(session) is not None
