"""``core.trace_views`` is ``core.analysis.trace_views``: the module moved, and this name stays importable (the same module
object, so ``monkeypatch`` on either name patches both)."""
import sys

from core.analysis import trace_views as _moved

sys.modules[__name__] = _moved
