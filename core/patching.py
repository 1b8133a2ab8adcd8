"""``core.patching`` is ``core.analysis.patching`` (the issue's name for it; the same module object)."""
import sys

from core.analysis import patching as _moved

sys.modules[__name__] = _moved
