"""The Parameters and cost page's own figures (figures).

The page itself is pages/parameters.py beside this folder (see ui/frame.py: Streamlit's legacy pages/ mode needs it there)."""
