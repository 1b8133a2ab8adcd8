"""``core.recipes`` is ``core.training.recipes``: the module moved, and this name stays importable (the same module
object, so ``monkeypatch`` on either name patches both)."""
import sys

from core.training import recipes as _moved

sys.modules[__name__] = _moved
