"""``core.study_grid`` is ``core.training.study_grid``: the module moved, and this name stays importable (the same module
object, so ``monkeypatch`` on either name patches both)."""
import sys

from core.training import study_grid as _moved

sys.modules[__name__] = _moved
