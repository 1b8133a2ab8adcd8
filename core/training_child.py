"""``core.training_child`` is ``core.training.training_child``: the module moved, and this name stays importable (the same module
object, so ``monkeypatch`` on either name patches both)."""
import sys

from core.training import training_child as _moved

sys.modules[__name__] = _moved
