"""A trained run kept: saved as a model folder under a cleaned name, and packed for download, as our
checkpoint folder or as a Hugging Face GPT-2 folder."""
from __future__ import annotations

from core.nn.model_store import checkpoint_zip, sanitise_model_name
from core.nn.checkpoint import load_checkpoint
from core.nn.hf import export_zip
from core.training.quota import QuotaError, models_of

HF_SUFFIX = "-gpt2"  # the exported folder and its zip are the model's name with this after it


def name_note(name: str) -> str | None:
    """What the name box should say under it: the cleaned name a save will use when it differs, the reason a
    name cannot be used, or None when it is saved as typed."""
    try:
        clean = sanitise_model_name(name)  # what job.save will call the folder
    except ValueError as e:  # nothing usable is left of the name
        return str(e)
    return None if clean == name else f"It will be saved as **{clean}**."


def save_run(job, models_dir, name: str, *, protected: list[str], overwrite: bool,
             owner: str) -> tuple[dict | None, str | None]:
    """Save ``job``'s run (a core.training.training_job.TrainingJob) in ``models_dir``: ({name, path, step}, None), or
    (None, why not). A refusal, a full disk or quota, or a process that does not answer leaves the run as it was,
    still savable; a refusal for the quota names the owner's models, one of which they may replace."""
    try:
        path = job.save(models_dir, name, protected=protected, overwrite=overwrite, owner=owner)
    # a refusal (a name taken, someone else's, a shipped one, the quota) is a ValueError; a full disk, or a
    # training process that does not answer (ChildProcessError, TimeoutError), an OSError
    except (ValueError, OSError) as e:
        error = str(e)
        if isinstance(e, QuotaError) and (mine := models_of(models_dir, owner)):
            error += f". Yours: {', '.join(mine)}"
        return None, error
    # no zips kept: the download buttons pack the saved folder when clicked (two zips per save, about twice the
    # weights, stayed in the session's memory until it ended)
    return {"name": path.name, "path": str(path), "step": job.status().step}, None


def hf_zip_name(name: str) -> str:
    return f"{name}{HF_SUFFIX}.zip"


def hf_zip(path, name: str) -> bytes:
    """The saved model at ``path`` as a Hugging Face GPT-2 folder, zipped: what was written, read back."""
    model, tok = load_checkpoint(path)
    return export_zip(model, tok, f"{name}{HF_SUFFIX}")


def downloads(saved: dict) -> list[tuple]:
    """(kind, label, data, file name, help) of the download buttons of a model saved by save_run: our folder
    (kind ""), and a Hugging Face GPT-2 folder (kind "_hf"; the page's widget keys end with the kind). Each
    ``data`` packs its zip only when called, on the click (a zip kept per save would hold about twice the weights
    in the session's memory)."""
    name, path = saved["name"], saved["path"]
    return [("", "Download the checkpoint folder (.zip)", lambda: checkpoint_zip(path), f"{name}.zip", None),
            ("_hf", "Download for transformers (.zip)", lambda: hf_zip(path, name), hf_zip_name(name),
             "The same model as a Hugging Face GPT-2 folder: GPT2LMHeadModel.from_pretrained(folder) gives the same "
             "logits and AutoTokenizer the same token ids, so you can go on in transformers, TransformerLens or any "
             "Hugging Face tool.")]
