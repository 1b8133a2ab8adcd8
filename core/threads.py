"""``core.threads`` is ``core.serve.threads``: the module moved, and this name stays importable (the same module
object, so ``monkeypatch`` on either name patches both)."""
import sys

from core.serve import threads as _moved

sys.modules[__name__] = _moved
