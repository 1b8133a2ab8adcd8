"""``core.train`` is ``core.training.trainer``: the module moved, and this name stays importable (the same module
object, so ``monkeypatch`` on either name patches both)."""
import sys

if __name__ == "__main__":  # python -m core.train ...: the command line
    from core.training.trainer import main

    raise SystemExit(main())
else:
    from core.training import trainer as _moved

    sys.modules[__name__] = _moved
