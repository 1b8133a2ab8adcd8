"""``core.study_engines`` is ``core.training.study_engines``: the module moved, and this name stays importable (the same module
object, so ``monkeypatch`` on either name patches both)."""
import sys

from core.training import study_engines as _moved

sys.modules[__name__] = _moved
