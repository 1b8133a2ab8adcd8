"""``core.fmt`` is ``core.serve.fmt``: the module moved, and this name stays importable (the same module
object, so ``monkeypatch`` on either name patches both)."""
import sys

from core.serve import fmt as _moved

sys.modules[__name__] = _moved
