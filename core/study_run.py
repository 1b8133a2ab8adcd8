"""``core.study_run`` is ``core.training.study_run``: the module moved, and this name stays importable (the same module
object, so ``monkeypatch`` on either name patches both)."""
import sys

from core.training import study_run as _moved

sys.modules[__name__] = _moved
