"""Keeping a trained run (core.training.model_export): the name a save will use, a save and its refusals in words, and
the two zips packed from the saved folder."""
import io
import json
import types
import zipfile
from pathlib import Path

import torch

from core.training import model_export
from core.nn.model_store import save_checkpoint
from core.nn.config import ModelConfig
from core.nn.model import Transformer
from core.training.quota import QuotaError
from core.nn.tokenizer import CharTokenizer


def test_the_name_box_says_what_a_save_will_do():
    assert model_export.name_note("tiny-model_2.1") is None  # saved as typed
    assert model_export.name_note("my tiny/model") == "It will be saved as **my-tiny-model**."
    assert "give the model a name" in model_export.name_note("///")


class _Job:
    """Stands in for a finished core.training.training_job.TrainingJob whose save returns ``result`` or raises it."""

    def __init__(self, result):
        self.result, self.asked = result, None

    def save(self, models_dir, name, **kw):
        self.asked = (models_dir, name, kw)
        if isinstance(self.result, Exception):
            raise self.result
        return self.result

    def status(self):
        return types.SimpleNamespace(step=7)


def test_a_save_gives_the_saved_model_or_the_reason_in_words(tmp_path):
    job = _Job(tmp_path / "tiny")
    saved, error = model_export.save_run(job, tmp_path, "tiny", protected=["shipped"], overwrite=True, owner="ab12")
    assert error is None and saved == {"name": "tiny", "path": str(tmp_path / "tiny"), "step": 7}
    assert job.asked == (tmp_path, "tiny", {"protected": ["shipped"], "overwrite": True, "owner": "ab12"})
    for e in (ValueError("you already have a model named 'tiny'"), OSError(28, "No space left on device"),
              ChildProcessError("the training process did not answer")):
        assert model_export.save_run(_Job(e), tmp_path, "tiny", protected=[], overwrite=False, owner="ab12") == (
            None, str(e))


def _save_tiny(folder: Path, owner: str | None = None) -> Path:
    torch.manual_seed(0)
    model = Transformer(ModelConfig(vocab_size=5, n_ctx=8, d_model=8, n_heads=2, n_layers=1)).eval()
    return save_checkpoint(folder, model, CharTokenizer.from_text("abcde"), owner=owner)


def test_a_refusal_for_the_quota_names_the_owners_models(tmp_path):
    for name, owner in (("mine-a", "ab12"), ("theirs", "cd34"), ("mine-b", "ab12")):
        _save_tiny(tmp_path / name, owner)
    refusal = QuotaError("you have 2 saved models")
    _, error = model_export.save_run(_Job(refusal), tmp_path, "x", protected=[], overwrite=False, owner="ab12")
    assert error == "you have 2 saved models. Yours: mine-a, mine-b"
    _, error = model_export.save_run(_Job(refusal), tmp_path, "x", protected=[], overwrite=False, owner="ef56")
    assert error == "you have 2 saved models"  # nothing of theirs to list


def test_both_downloads_pack_the_saved_folder_when_asked(tmp_path):
    folder = _save_tiny(tmp_path / "tiny")
    saved = {"name": "tiny", "path": str(folder), "step": 3}
    (kind, label, data, file_name, help), (kind_hf, label_hf, data_hf, file_hf, help_hf) = model_export.downloads(saved)
    assert (kind, file_name, help) == ("", "tiny.zip", None) and label.startswith("Download the checkpoint folder")
    assert (kind_hf, file_hf) == ("_hf", "tiny-gpt2.zip") and "GPT2LMHeadModel.from_pretrained" in help_hf
    ours = zipfile.ZipFile(io.BytesIO(data()))
    assert sorted(ours.namelist()) == sorted(f"tiny/{p.name}" for p in folder.iterdir())
    hf = zipfile.ZipFile(io.BytesIO(data_hf()))
    assert {n.split("/")[0] for n in hf.namelist()} == {"tiny-gpt2"}  # one folder when unpacked
    config = json.loads(hf.read("tiny-gpt2/config.json"))
    assert (config["n_embd"], config["n_layer"], config["n_head"], config["vocab_size"]) == (8, 1, 2, 5)
    assert model_export.hf_zip_name("tiny") == "tiny-gpt2.zip"

