"""The Your scaling law page's own sections: the forecast (forecast) and the repetition study (repetition).

The page itself is pages/scaling_fit.py beside this folder (see ui/frame.py: Streamlit's legacy pages/ mode needs it there)."""
