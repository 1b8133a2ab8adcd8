"""Security properties, one test each: no pickle, safe names, no HTML from users, capped uploads, XSRF."""
import re
import tomllib
from pathlib import Path

import pytest
import torch

from core.checkpoint import CheckpointError, load_checkpoint, save_checkpoint
from core.model import ModelConfig, Transformer
from core.tokenizer import CharTokenizer

ROOT = Path(__file__).resolve().parent.parent
APP_CODE = [ROOT / "app.py", ROOT / "ui.py", *sorted((ROOT / "pages").glob("*.py")), *sorted((ROOT / "core").glob("*.py"))]


def code(path: Path) -> str:
    # drop comments and docstring-ish lines that merely mention the words
    return "\n".join(line for line in path.read_text().splitlines() if not line.lstrip().startswith("#"))


def test_no_pickle_anywhere_in_the_app():
    for path in APP_CODE:
        text = code(path)
        assert not re.search(r"^\s*(import|from)\s+(pickle|dill|cloudpickle|joblib)\b", text, re.M), path
        assert "torch.load(" not in text, f"{path} uses torch.load"
        assert "pickle.load" not in text, path


def test_a_pickle_disguised_as_weights_is_refused(tmp_path):
    tok = CharTokenizer.from_text("abc")
    model = Transformer(ModelConfig(vocab_size=3, n_ctx=4, d_model=4, n_heads=1, n_layers=1))
    path = save_checkpoint(tmp_path / "m", model, tok)
    import io
    import pickle

    class Evil:
        def __reduce__(self):
            return (print, ("pwned",))

    buf = io.BytesIO()
    pickle.dump({"x": Evil()}, buf)
    (path / "model.safetensors").write_bytes(buf.getvalue())
    with pytest.raises(CheckpointError, match="safetensors"):
        load_checkpoint(path)
    torch.save(model.state_dict(), path / "model.safetensors")  # a torch zip-pickle under the right name
    with pytest.raises(CheckpointError, match="safetensors"):
        load_checkpoint(path)


def test_no_unsafe_html_with_user_text():
    for path in APP_CODE:
        text = code(path)
        assert "unsafe_allow_html=True" not in text, f"{path} renders raw HTML"
        for m in re.finditer(r"st\.html\(([^)]*)\)", text):
            # st.html is allowed only for markup built by a function that escapes user text
            assert "escape" in text, f"{path}: st.html without html.escape"


def test_upload_size_is_capped_and_xsrf_stays_on():
    cfg = tomllib.loads((ROOT / ".streamlit" / "config.toml").read_text())
    assert 0 < cfg["server"]["maxUploadSize"] <= 50
    assert cfg["server"].get("enableXsrfProtection", True) is True
    assert cfg["server"].get("enableCORS", True) is True  # turning CORS off would also weaken XSRF


def test_streamlit_reads_those_settings_from_the_repo():
    import subprocess
    import sys

    out = subprocess.run(
        [sys.executable, "-c", "from streamlit import config; config.get_config_options(force_reparse=True);"
                               "print(config.get_option('server.maxUploadSize'), config.get_option('server.enableXsrfProtection'))"],
        cwd=ROOT, capture_output=True, text=True, timeout=60)
    cap, xsrf = out.stdout.split()[-2:]
    assert int(cap) <= 50 and xsrf == "True"


def test_checkpoint_loading_never_leaves_the_given_folder(tmp_path):
    # a config.json cannot point the loader at another file: names are fixed, paths are not read from JSON
    tok = CharTokenizer.from_text("ab")
    model = Transformer(ModelConfig(vocab_size=2, n_ctx=4, d_model=4, n_heads=1, n_layers=1))
    path = save_checkpoint(tmp_path / "m", model, tok)
    import json

    cfg = json.loads((path / "config.json").read_text())
    cfg["weights"] = "../../etc/passwd"
    (path / "config.json").write_text(json.dumps(cfg))
    loaded, _ = load_checkpoint(path)  # extra keys are ignored; the weights still come from the folder
    assert torch.equal(loaded.head.weight, model.head.weight)


def test_a_file_name_cannot_put_links_into_the_shared_model_card():
    from core.checkpoint import model_card

    card = model_card("mine", ModelConfig(vocab_size=3, n_ctx=4, d_model=4, n_heads=1, n_layers=1),
                      {"corpus": "[Sign in again](https://evil.example) | ![](https://t.example/p.png) x.txt"})
    data_row = next(line for line in card.splitlines() if line.startswith("| data |"))
    assert len(re.findall(r"(?<!\\)\|", data_row)) == 3  # still two cells: every pipe of the name is escaped
    assert not re.search(r"(?<!\\)\]\(", data_row)  # and no live link or image
