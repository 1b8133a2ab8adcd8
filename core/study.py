"""``python -m core.study``: a scaling study from the command line (core.training.study). Only a command line: code
imports core.training.study."""
if __name__ == "__main__":
    from core.training.study import main  # local: a __main__ entry (importing it here would run nothing else)

    raise SystemExit(main())
