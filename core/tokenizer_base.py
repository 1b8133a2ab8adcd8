"""``core.tokenizer_base`` is ``core.nn.tokenizer_base``: the module moved, and this name stays importable (the same module
object, so ``monkeypatch`` on either name patches both)."""
import sys

from core.nn import tokenizer_base as _moved

sys.modules[__name__] = _moved
