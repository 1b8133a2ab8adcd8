"""``core.model_discovery`` is ``core.nn.model_discovery``: the module moved, and this name stays importable (the same module
object, so ``monkeypatch`` on either name patches both)."""
import sys

from core.nn import model_discovery as _moved

sys.modules[__name__] = _moved
