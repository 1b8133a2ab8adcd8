"""``python -m core.train``: train one model from the command line (core.training.trainer). Only a command line: code
imports core.training.trainer."""
if __name__ == "__main__":
    from core.training.trainer import main  # local: a __main__ entry (importing it here would run nothing else)

    raise SystemExit(main())
