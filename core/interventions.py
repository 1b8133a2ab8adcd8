"""``core.interventions`` is ``core.analysis.interventions``: the module moved, and this name stays importable (the same module
object, so ``monkeypatch`` on either name patches both)."""
import sys

from core.analysis import interventions as _moved

sys.modules[__name__] = _moved
