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
    from core.hf import export_zip
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
