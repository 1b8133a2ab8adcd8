"""Serving many sessions: the compute gate, thread counts, paths, formatting, safe file access."""
