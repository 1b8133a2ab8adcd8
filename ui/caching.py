"""Page caches of work on a model: for the server, keyed by the model's key string, never by the model object."""
from __future__ import annotations

import contextvars
import threading

import streamlit as st

from ui.compute import gated

# The page run's function whose result is being computed, set only while its call is under way: the cache's
# body (made once per process) runs it, and keeps no reference to it, nor to the model it reads, once it returned.
_RUN_FN: contextvars.ContextVar = contextvars.ContextVar("te_model_cache_fn")
_CACHES: dict = {}  # (fn's code, settings) -> its st.cache_data / st.cache_resource function, one per process
_CACHES_LOCK = threading.Lock()


def model_cache(fn, max_entries: int, spinner: bool | str = False, what: str | None = None, lane: str = "short",
                resource: bool = False):
    """``fn(*args)``, a page's work on its model (``fn`` reads the page's own ``model``), cached for the server: the
    page calls ``call(key, *args)`` with ``key = ui.model_key(entry)``, the string naming the model's weights.

    - The model is never an argument: ``ui.gated`` keeps the arguments of recent calls, and Streamlit would hash
      them; an argument list holding models would keep evicted ones (a GPT-2 small is 0.5 GB) alive.
    - Each ``fn`` has a cache of its own (``max_entries`` results; st.cache_resource with ``resource``, which hands
      out the one object it holds, else st.cache_data). Streamlit names a cache by its function's source, and the
      body below has one source for all: so it is named by ``fn``'s code object and file (code objects compare by
      their bytecode, names, constants and line, not their file), which a page rerun compiles again equal and an
      edit of ``fn`` changes.
    - ``what``: work not in the cache waits in the compute line (``ui.gated``, in ``lane``) and the line says
      ``what`` is waiting; None: the work never waits in the line (timing one pass, say).

    The cache's function is made once per process (Streamlit reads a function's source each time one is made),
    and the body it runs on a miss is this run's ``fn``, handed over for the call only, as a page's own cached
    function would see this run's model."""
    ident = (fn.__code__, fn.__code__.co_filename, max_entries, spinner, resource)  # holds no globals: no model
    with _CACHES_LOCK:
        if ident not in _CACHES:
            def body(key, *args):  # key: only in the cache's key; the model is the one this run's fn reads
                return _RUN_FN.get()(*args)

            body.__qualname__ = f"model_cache.{fn.__qualname__}.{hash(ident) & 0xFFFFFFFFFFFF:012x}"  # its cache's name
            make = st.cache_resource if resource else st.cache_data
            _CACHES[ident] = make(body, max_entries=max_entries, show_spinner=spinner)
        cached = _CACHES[ident]
    run = cached if what is None else gated(cached, what, lane=lane)

    def call(key: str, *args):
        token = _RUN_FN.set(fn)
        try:
            return run(key, *args)
        finally:  # even when interrupted by a rerun (StopException): nothing of this run is left behind
            _RUN_FN.reset(token)

    call.cached = cached  # for tests: the st.cache_* function itself (its clear(), its max_entries)
    return call
