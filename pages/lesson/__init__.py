"""The Lesson page's own figures (figures): one figure per step.

The page itself is pages/lesson.py beside this folder (see ui/frame.py: Streamlit's legacy pages/ mode needs it there)."""
