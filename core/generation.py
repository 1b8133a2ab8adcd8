"""``core.generation`` is ``core.analysis.generation``: the module moved, and this name stays importable (the same module
object, so ``monkeypatch`` on either name patches both)."""
import sys

from core.analysis import generation as _moved

sys.modules[__name__] = _moved
