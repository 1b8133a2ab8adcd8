"""The Generation page's own sections (parts): steering a feature while the model writes.

The page itself is pages/generation.py beside this folder (see ui/frame.py: Streamlit's legacy pages/ mode needs it there)."""
