"""The Attention page's own figures: the head panels and the grid of every head at once.

The page itself is pages/attention.py beside this folder (see ui/frame.py: Streamlit's legacy pages/ mode needs it there)."""
