"""``core.scaling_study`` is ``core.training.scaling_study``: the module moved, and this name stays importable (the same module
object, so ``monkeypatch`` on either name patches both)."""
import sys

from core.training import scaling_study as _moved

sys.modules[__name__] = _moved
