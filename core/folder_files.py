"""``core.folder_files`` is ``core.serve.folder_files``: the module moved, and this name stays importable (the same module
object, so ``monkeypatch`` on either name patches both)."""
import sys

from core.serve import folder_files as _moved

sys.modules[__name__] = _moved
