"""The Inside the model page's own view-model (view): the steps of the residual stream in words and rows.

The page itself is pages/inside.py beside this folder (see ui/frame.py: Streamlit's legacy pages/ mode needs it there)."""
