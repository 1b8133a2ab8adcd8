"""``core.bpe`` is ``core.nn.bpe``: the module moved, and this name stays importable (the same module
object, so ``monkeypatch`` on either name patches both)."""
import sys

from core.nn import bpe as _moved

sys.modules[__name__] = _moved
