"""The Over training page's own view-model (view) and figures (figures).

The page itself is pages/over_training.py beside this folder (see ui/frame.py: Streamlit's legacy pages/ mode needs it there)."""
