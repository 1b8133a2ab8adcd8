"""``python -m core.bpe_induction``: why the sub-word model grows no induction head, one factor at a time
(core.training.bpe_induction)."""
if __name__ == "__main__":
    from core.training.bpe_induction import main

    raise SystemExit(main())
