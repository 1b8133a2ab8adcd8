"""``core.job_settings`` is ``core.training.job_settings``: the module moved, and this name stays importable (the same module
object, so ``monkeypatch`` on either name patches both)."""
import sys

from core.training import job_settings as _moved

sys.modules[__name__] = _moved
