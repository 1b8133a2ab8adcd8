"""``core.safetensors_header`` is ``core.nn.safetensors_header``: the module moved, and this name stays importable (the same module
object, so ``monkeypatch`` on either name patches both)."""
import sys

from core.nn import safetensors_header as _moved

sys.modules[__name__] = _moved
