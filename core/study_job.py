"""``core.study_job`` is ``core.training.study_job``: the module moved, and this name stays importable (the same module
object, so ``monkeypatch`` on either name patches both)."""
import sys

from core.training import study_job as _moved

sys.modules[__name__] = _moved
