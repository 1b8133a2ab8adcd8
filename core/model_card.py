"""``core.model_card`` is ``core.nn.model_card``: the module moved, and this name stays importable (the same module
object, so ``monkeypatch`` on either name patches both)."""
import sys

from core.nn import model_card as _moved

sys.modules[__name__] = _moved
