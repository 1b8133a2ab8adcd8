"""``core.tokenizer`` is ``core.nn.tokenizer``: the module moved, and this name stays importable (the same module
object, so ``monkeypatch`` on either name patches both)."""
import sys

from core.nn import tokenizer as _moved

sys.modules[__name__] = _moved
