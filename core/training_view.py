"""``core.training_view`` is ``core.figures.training_view``: the module moved, and this name stays importable (the same module
object, so ``monkeypatch`` on either name patches both)."""
import sys

from core.figures import training_view as _moved

sys.modules[__name__] = _moved
