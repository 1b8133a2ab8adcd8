"""``core.fetch`` is ``core.training.fetch``: the module moved, and this name stays importable (the same module
object, so ``monkeypatch`` on either name patches both)."""
import sys

from core.training import fetch as _moved

sys.modules[__name__] = _moved
