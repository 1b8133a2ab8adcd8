"""``core.checkpoint`` is ``core.nn.checkpoint``: the module moved, and this name stays importable (the same module
object, so ``monkeypatch`` on either name patches both)."""
import sys

from core.nn import checkpoint as _moved

sys.modules[__name__] = _moved
