"""Where the app keeps what its users add: the models they train (TE_MODELS_DIR, default ``models/`` in the
repository) and, beside that folder, corpora fetched on request (``corpora/``). One home for both settings, so
core (the corpus lookup) and the UI (the model picker) agree."""
from __future__ import annotations

import os
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]  # core/serve/paths.py -> the repository
MODELS_ENV = "TE_MODELS_DIR"


def user_models_dir() -> Path:
    """The models folder: TE_MODELS_DIR, a relative path counting from the repository root."""
    path = Path(os.environ.get(MODELS_ENV, "models")).expanduser()
    return path if path.is_absolute() else REPO_ROOT / path


def corpora_dir() -> Path:
    """Fetched corpora live beside the models folder (models/ -> corpora/): both hold what users added, and a
    container mounts both as volumes."""
    return user_models_dir().parent / "corpora"
