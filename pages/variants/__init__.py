"""The Why each piece page's own figures (figures).

The page itself is pages/variants.py beside this folder (see ui/frame.py: Streamlit's legacy pages/ mode needs it there)."""
