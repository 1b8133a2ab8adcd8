"""``core.induction_figures`` is ``core.figures.induction_figures``: the module moved, and this name stays importable (the same module
object, so ``monkeypatch`` on either name patches both)."""
import sys

from core.figures import induction_figures as _moved

sys.modules[__name__] = _moved
