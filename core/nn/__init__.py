"""The network itself: config, model, tokenizers, checkpoints and GPT-2 folders."""
