"""``core.study_files`` is ``core.training.study_files``: the module moved, and this name stays importable (the same module
object, so ``monkeypatch`` on either name patches both)."""
import sys

from core.training import study_files as _moved

sys.modules[__name__] = _moved
