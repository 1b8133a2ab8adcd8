"""The Attribution graph page's own modules: its view-model (view), its graph figure (figures) and its sections (parts).

The page itself is pages/attribution.py beside this folder (see ui/frame.py: Streamlit's legacy pages/ mode needs it there)."""
