"""``core.scaling_runs`` is ``core.analysis.scaling_runs``: the module moved, and this name stays importable (the same module
object, so ``monkeypatch`` on either name patches both)."""
import sys

from core.analysis import scaling_runs as _moved

sys.modules[__name__] = _moved
