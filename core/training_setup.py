"""``core.training_setup`` is ``core.training.training_setup``: the module moved, and this name stays importable (the same module
object, so ``monkeypatch`` on either name patches both)."""
import sys

from core.training import training_setup as _moved

sys.modules[__name__] = _moved
