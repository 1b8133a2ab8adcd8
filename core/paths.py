"""``core.paths`` is ``core.serve.paths``: the module moved, and this name stays importable (the same module
object, so ``monkeypatch`` on either name patches both)."""
import sys

from core.serve import paths as _moved

sys.modules[__name__] = _moved
