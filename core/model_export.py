"""``core.model_export`` is ``core.training.model_export``: the module moved, and this name stays importable (the same module
object, so ``monkeypatch`` on either name patches both)."""
import sys

from core.training import model_export as _moved

sys.modules[__name__] = _moved
