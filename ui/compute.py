"""The compute line: page work waits for a slot of the server's gate (core.serve.gate), unless its result is cached.
Also whose background runs are still wanted (a session's id, and whether it is still alive)."""
from __future__ import annotations

import collections
import threading

import streamlit as st

from core.serve.cores import server_budget
from core.serve.gate import Gate, GateFull, gate_slots


@st.cache_resource
def compute_gate(lane: str = "short") -> Gate | None:
    """The server's gates of page work (core.serve.gate), one per lane. "short": a page's analysis of a new prompt
    (a few hundred ms), as many at once as cores. "long": generating text (seconds), one fewer: with a single
    line, a quick attention rerun waited behind every text being generated (measured: attention p50 8 -> 15 s
    with 30 students), so long work never takes every core. Both draw their cores from the server's one budget
    (core.serve.cores), which background jobs draw from too."""
    slots = gate_slots()
    if not slots:  # TE_COMPUTE_SLOTS=0: no gate, every page computes at once
        return None
    return Gate(slots if lane == "short" else max(1, slots - 1), budget=server_budget())


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
    if gate is None or gate.held():  # no gate, or this run holds its slot already
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


_GATED: dict = {}  # one (LRU, lock) per cached function, for the process (see gated)
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
        with lock:  # recorded only now that it returned: an interrupted call is not a hit next time
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


# ------------------------------------------------------------------ whose background runs are still wanted
def session_id() -> str | None:
    """This browser session's id in Streamlit's runtime (None outside a script run). Core keeps it as an opaque
    string and asks ``session_alive`` about it."""
    # local: Streamlit's runtime internals, there only inside a running app
    from streamlit.runtime.scriptrunner import get_script_run_ctx
    ctx = get_script_run_ctx()
    return ctx.session_id if ctx is not None else None


def session_alive(session: str) -> bool:
    """False once Streamlit has forgotten the session ``session``: its tab was closed (or reloaded) and the two
    minutes in which it could reconnect have passed, so no one can reach its state again. True while it is
    connected or may still reconnect, and whenever it cannot be told (no server runtime, as under AppTest).
    Streamlit's session manager is not public API: should it change, every session counts as alive."""
    from streamlit import runtime  # local: Streamlit's runtime internals, there only inside a running app
    if not runtime.exists():
        return True
    info = getattr(getattr(runtime.get_instance(), "_session_mgr", None), "get_session_info", None)
    return info is None or info(session) is not None


def approved(key, expected_s: float, auto_s: float, label: str, note: str = "", button_key: str | None = None) -> bool:
    """Whether costly work may run now: at once when it is expected to take at most ``auto_s`` seconds or this
    session asked for ``key`` before (its result is cached, or the learner already waited once); else ``note`` and a
    button ``label``, and False until the learner presses it. The cost is said before anything runs."""
    asked = st.session_state.setdefault("te_approved", set())
    if expected_s <= auto_s or key in asked:
        return True
    if note:
        st.markdown(note)
    if st.button(label, key=button_key or f"te_approve::{hash(key) & 0xFFFFFFFF:08x}"):
        asked.add(key)
        return True
    return False


def in_steps(n: int, step, text: str, bar: bool = True) -> list:
    """[step(0), ..., step(n - 1)], with a progress bar ("text: k of n") moving between them when ``bar``; the bar
    is gone once all are done."""
    shown = st.progress(0.0, text=f"{text} ...") if bar else None
    out = []
    for k in range(n):
        out.append(step(k))
        if shown is not None:
            shown.progress((k + 1) / n, text=f"{text}: {k + 1} of {n} done")
    if shown is not None:
        shown.empty()
    return out
