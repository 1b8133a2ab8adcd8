"""``core.gate`` is ``core.serve.gate``: the module moved, and this name stays importable (the same module
object, so ``monkeypatch`` on either name patches both)."""
import sys

from core.serve import gate as _moved

sys.modules[__name__] = _moved
