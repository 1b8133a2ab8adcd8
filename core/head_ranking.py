"""``core.head_ranking`` is ``core.analysis.head_ranking``: the module moved, and this name stays importable (the same module
object, so ``monkeypatch`` on either name patches both)."""
import sys

from core.analysis import head_ranking as _moved

sys.modules[__name__] = _moved
