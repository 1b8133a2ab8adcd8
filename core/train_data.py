"""``core.train_data`` is ``core.training.train_data``: the module moved, and this name stays importable (the same module
object, so ``monkeypatch`` on either name patches both)."""
import sys

from core.training import train_data as _moved

sys.modules[__name__] = _moved
