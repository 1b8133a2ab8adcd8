"""The Class page's own sections: the store and the round (parts), how a round is drawn (views), the teacher's side (teacher), who is on the page (identity) and a forecast as a round (forecast).

The page itself is pages/classroom.py beside this folder (see ui/frame.py: Streamlit's legacy pages/ mode needs it there)."""
