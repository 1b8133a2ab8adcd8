"""``core.speed`` is ``core.training.speed``: the module moved, and this name stays importable (the same module
object, so ``monkeypatch`` on either name patches both)."""
import sys

from core.training import speed as _moved

sys.modules[__name__] = _moved
