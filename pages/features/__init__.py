"""The Features page's own modules: the feature cards (cards), the background SAE panels (jobs) and their figures (figures, forming).

The page itself is pages/features.py beside this folder (see ui/frame.py: Streamlit's legacy pages/ mode needs it there)."""
