"""``core.study`` is ``core.training.study``: the module moved, and this name stays importable (the same module
object, so ``monkeypatch`` on either name patches both)."""
import sys

if __name__ == "__main__":  # python -m core.study ...: the command line
    from core.training.study import main

    raise SystemExit(main())
else:
    from core.training import study as _moved

    sys.modules[__name__] = _moved
