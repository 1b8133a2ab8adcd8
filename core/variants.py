"""``python -m core.variants``: the lecture's model taken apart and retrained piece by piece (core.training.variants)."""
import sys

if __name__ == "__main__":  # python -m core.variants ...: the command line
    from core.training.variants import main

    raise SystemExit(main())
else:
    from core.training import variants as _moved

    sys.modules[__name__] = _moved
