"""The Scaling laws page's own sections (parts): using the law at inference and with unique data.

The page itself is pages/scaling.py beside this folder (see ui/frame.py: Streamlit's legacy pages/ mode needs it there)."""
