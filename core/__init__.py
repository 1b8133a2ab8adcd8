"""Pure computation for Transformer Explorer: model, tokenizer, checkpoints, training, figures.

Nothing in this package imports streamlit; pages call into it.
"""
