"""The text a model learns from and is measured on, below both analysis and training:

    corpus    the corpora (Tiny Shakespeare, Python's documentation), read with checks, and the 90/10 split
    budget    a run's memory budget (TE_RUN_MEMORY) and the largest corpus file a run reads under it
    held_out  a model's held-out text as full windows of n_ctx tokens (what SAEs, transcoders and scores read)"""
