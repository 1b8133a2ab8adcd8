"""``core.study_figures`` is ``core.figures.study_figures``: the module moved, and this name stays importable (the same module
object, so ``monkeypatch`` on either name patches both)."""
import sys

from core.figures import study_figures as _moved

sys.modules[__name__] = _moved
