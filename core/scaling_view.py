"""``core.scaling_view`` is ``core.analysis.scaling_view``: the module moved, and this name stays importable (the same module
object, so ``monkeypatch`` on either name patches both)."""
import sys

from core.analysis import scaling_view as _moved

sys.modules[__name__] = _moved
