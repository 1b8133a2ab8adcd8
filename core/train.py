"""``python -m core.train``: train one model from the command line (core.training.train_cli). Only a command line: code
imports core.training.train_cli or core.training.trainer."""
if __name__ == "__main__":
    from core.training.train_cli import main  # local: a __main__ entry (importing it here would run nothing else)

    raise SystemExit(main())
