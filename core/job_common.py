"""``core.job_common`` is ``core.training.job_common``: the module moved, and this name stays importable (the same module
object, so ``monkeypatch`` on either name patches both)."""
import sys

from core.training import job_common as _moved

sys.modules[__name__] = _moved
