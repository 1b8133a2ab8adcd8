"""``core.model_store`` is ``core.nn.model_store``: the module moved, and this name stays importable (the same module
object, so ``monkeypatch`` on either name patches both)."""
import sys

from core.nn import model_store as _moved

sys.modules[__name__] = _moved
