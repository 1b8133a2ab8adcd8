"""``core.hf`` is ``core.nn.hf``: the module moved, and this name stays importable (the same module
object, so ``monkeypatch`` on either name patches both)."""
import sys

from core.nn import hf as _moved

sys.modules[__name__] = _moved
