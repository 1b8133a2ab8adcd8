"""``python -m core.variants``: the lecture's model taken apart and retrained piece by piece (core.training.variants).
Only a command line: code imports core.training.variants."""
if __name__ == "__main__":
    from core.training.variants import main  # local: a __main__ entry (importing it here would run nothing else)

    raise SystemExit(main())
