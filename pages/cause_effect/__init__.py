"""The Cause and effect page's own sections (parts): the patching runs and what they show.

The page itself is pages/cause_effect.py beside this folder (see ui/frame.py: Streamlit's legacy pages/ mode needs it there)."""
