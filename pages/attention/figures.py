"""The note on byte pieces below the Attention page's figures. The figures themselves: one head's panels
(``core.figures.attention_panels``), every head at once (``pages.attention.grid``); the token axes' ticks are
``core.figures.ticks``, the panel layouts ``core.figures.common``. Pure functions: token ids in, a sentence out."""
from __future__ import annotations

from core.serve.fmt import visible


def byte_pieces_note(tok, ids, examples: int = 3) -> str | None:
    """One sentence on the pieces of characters among ``ids`` (a byte-level BPE writes a character it has no
    token for as its UTF-8 bytes, one token each, shown ⟨f0⟩ ⟨9f⟩ ...), with up to ``examples`` runs of them and
    the character(s) they spell; None when the prompt has none (any character tokenizer, most English text)."""
    partial = tok.partial_ids()
    runs, run = [], []
    for i in list(ids) + [None]:  # a None at the end closes the last run
        if i is not None and int(i) in partial:
            run.append(int(i))
        elif run:
            runs.append(run)
            run = []
    if not runs:
        return None
    shown = []
    for r in runs[:examples]:
        pieces, text = " ".join(tok.visible_tokens(r)), tok.decode(r)
        # a run cut at the start of the window (n_ctx) may not spell a whole character: then no "= ..."
        shown.append(pieces if not text or "\ufffd" in text else f"{pieces} = {visible(text)}")
    more = f" and {len(runs) - examples} more" if len(runs) > examples else ""
    return (f"Labels such as {'; '.join(shown)}{more} are bytes in hexadecimal: a character the tokenizer splits "
            "into bytes, because it has no token for it (an emoji, an accented or non-Latin letter). Its UTF-8 code "
            "takes 2 to 4 bytes, and the model reads each byte as a token of its own.")
