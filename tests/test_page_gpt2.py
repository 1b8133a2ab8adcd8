"""Every page with a GPT-2-shaped model selected: a tiny random GPT2LMHeadModel (byte-level BPE, biases,
GELU, tied output map) saved by transformers into TE_MODELS_DIR, opened on each page."""
import pytest

pytest.importorskip("transformers")

from tests.conftest import app_pages  # noqa: E402
from tests.gpt2_folders import save_random_gpt2  # noqa: E402

NAME = "tiny-gpt2"


@pytest.fixture(scope="module")
def models_dir(tmp_path_factory):
    folder = tmp_path_factory.mktemp("models")
    save_random_gpt2(folder / NAME, n_positions=128)
    return folder


@pytest.mark.parametrize("page", [script for script, _ in app_pages()])
def test_every_page_renders_with_a_gpt2_model(open_page, models_dir, page):
    at = open_page(page, models_dir=models_dir, state={"te_model_name": NAME})
    assert at.session_state["te_current"][0].name == NAME
    text = " ".join(str(getattr(el, "value", "")) for kind in ("markdown", "caption", "info", "warning")
                    for el in at.get(kind))
    assert "Traceback" not in text


def test_home_offers_both_downloads_for_our_model_and_none_for_a_gpt2_folder(open_page, models_dir):
    import io
    import zipfile

    at = open_page("pages/home.py", models_dir=models_dir)  # the shipped character model
    labels = [b.label for b in at.get("download_button")]
    assert labels == ["Download the checkpoint folder (.zip)", "Download for transformers (.zip)"]
    from core.nn.hf import export_zip
    from ui import load_model

    entry = at.session_state["te_current"][0]
    model, tok = load_model(entry)
    names = zipfile.ZipFile(io.BytesIO(export_zip(model, tok, "x"))).namelist()
    assert "x/config.json" in names and "x/tokenizer.json" in names
    at = open_page("pages/home.py", models_dir=models_dir, state={"te_model_name": NAME})
    assert not at.get("download_button")
    assert any("Hugging Face GPT-2 folder already" in c.value for c in at.caption)
    text = " ".join(m.value for m in at.markdown)
    assert "byte-level BPE" in text and "has a bias" in text and "tied" in text


def test_parameters_page_counts_the_selected_gpt2_model(open_page, models_dir):
    transformers = pytest.importorskip("transformers")

    at = open_page("pages/parameters.py", models_dir=models_dir, state={"te_model_name": NAME})
    at.selectbox(key="par_preset").select(f"{NAME} (selected)").run()
    assert not at.exception
    assert at.toggle(key="par_bias").value and at.toggle(key="par_tied").value
    table = at.dataframe[0].value.set_index("part")
    assert set(table["agree"]) == {"✓"}
    theirs = transformers.GPT2LMHeadModel.from_pretrained(str(models_dir / NAME))
    assert table.loc["whole model", "counted in the model"] == sum(p.numel() for p in theirs.parameters())
    assert "attention biases b_Q, b_K, b_V, b_O (per block)" in table.index


def test_the_inside_page_speaks_of_the_models_own_nonlinearity(open_page, models_dir):
    """A GPT-2 folder runs GELU: the Inside page names GELU (never ReLU) and counts the hidden units whose input
    was 0 or below, which a GELU leaves negative, not 0. The count is taken from transformers' own MLP."""
    import json

    import torch
    from transformers import GPT2LMHeadModel

    at = open_page("pages/inside.py", models_dir=models_dir, state={"te_model_name": NAME})
    text = " ".join(m.value for m in at.markdown) + " ".join(l.value for l in at.latex)
    assert "GELU" in text and "ReLU" not in text
    metric = next(m for m in at.metric if m.label.startswith("Hidden units"))
    assert metric.label == "Hidden units 0 or below"
    tok = at.session_state["te_current"][2]
    ids = tok.encode(at.text_area(key="inside_prompt").value)
    pos = int(next(s for s in at.slider if s.key.startswith("inside_pos")).value) - 1  # the slider counts from 1
    hf = GPT2LMHeadModel.from_pretrained(models_dir / NAME).eval()
    with torch.no_grad():
        stream = hf.transformer(torch.tensor([ids]), output_hidden_states=True).hidden_states[0]  # block 1's input
        block = hf.transformer.h[0]
        h = block.mlp.act(block.mlp.c_fc(block.ln_2(stream + block.attn(block.ln_1(stream))[0])))[0, pos]
    silent = int((h <= 0).sum())
    assert int((h == 0).sum()) == 0 < silent  # what the old "exactly 0" count missed
    assert metric.value.startswith(f"{silent} of {h.numel()}")
    figure = next(json.loads(c.proto.spec) for c in at.get("plotly_chart") if "inside_mlp" in c.proto.id)
    assert any("after the GELU" in a["text"] for a in figure["layout"]["annotations"])
