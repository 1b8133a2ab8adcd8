"""The Switch heads off page's own modules (pages/heads.py is the page): its prompt buttons and its null controls."""
