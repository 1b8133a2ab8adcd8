"""A quick first page (bench.cold_start times it): the sidebar's folder scan and the model's load build the model on the
meta device without its initialisers (core.nn.meta), so a cold server never imports torch._dynamo before the first
heading; and the model picked in the sidebar stays picked from page to page."""
import subprocess
import sys
import threading

import pytest
import torch
from streamlit.runtime import pages_manager

from conftest import APP, ROOT, SHIPPED
from core.nn.meta import _SkipInitialisers, meta_transformer
from core.nn.config import ModelConfig
from core.nn.model import Transformer

VARIANTS = [dict(), dict(tie_weights=True), dict(mlp=False), dict(w_o=False), dict(positions=False),
            dict(norm="post"), dict(norm="none", residual=False)]


@pytest.mark.parametrize("switches", VARIANTS, ids=lambda s: ",".join(f"{k}={v}" for k, v in s.items()) or "lecture")
def test_the_meta_model_has_the_real_models_tensors(switches):
    cfg = ModelConfig(vocab_size=13, n_ctx=16, d_model=24, n_heads=3, n_layers=2, **switches)
    meta, real = meta_transformer(cfg), Transformer(cfg)  # the real one built on the CPU, initialised as usual
    assert {k: tuple(v.shape) for k, v in meta.state_dict().items()} == \
        {k: tuple(v.shape) for k, v in real.state_dict().items()}
    assert all(p.is_meta for p in meta.parameters()) and not any(p.is_meta for p in real.parameters())
    assert sum(p.numel() for p in meta.parameters()) == sum(p.numel() for p in real.parameters())


def test_skipping_initialisers_is_this_threads_alone():
    # while one thread sits inside the mode, a model another thread builds (a session's page run) is initialised:
    # its embedding's entries have the init's standard deviation 0.02, not whatever memory held
    inside, done = threading.Event(), threading.Event()

    def hold():
        with _SkipInitialisers():
            inside.set()
            done.wait(30)

    t = threading.Thread(target=hold)
    t.start()
    try:
        assert inside.wait(30)
        torch.manual_seed(0)
        real = Transformer(ModelConfig(vocab_size=500, n_ctx=16, d_model=64, n_heads=4, n_layers=1))
    finally:
        done.set()
        t.join()
    assert real.tok_emb.weight.std().item() == pytest.approx(0.02, rel=0.05)


def test_checking_and_loading_a_model_imports_no_torch_dynamo():
    # a fresh interpreter, as a cold server's first page run: the scan's check, then the load
    code = ("import sys; from core.nn.checkpoint import check_checkpoint, load_checkpoint; "
            f"check_checkpoint({str(SHIPPED)!r}); model, tok = load_checkpoint({str(SHIPPED)!r}); "
            "from core.nn.params import build_on_meta, count_module_parameters; "
            "count_module_parameters(build_on_meta(model.config)); "
            "print(sorted(m for m in sys.modules if m.startswith('torch._dynamo'))[:3])")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "[]"


@pytest.fixture
def navigation_mode(monkeypatch):
    """AppTest as a server is once app.py has run: AppTest starts every run in Streamlit's legacy pages/ mode (a
    later run executes the page alone, without app.py's sidebar); a real server leaves that mode for good at app.py's
    first st.navigation (ui/frame.py), and from then on every run is app.py's frame around the page."""
    init = pages_manager.PagesManager.__init__

    def navigated(self, *args, **kwargs):
        init(self, *args, **kwargs)
        pages_manager.PagesManager.uses_pages_directory = False

    monkeypatch.setattr(pages_manager.PagesManager, "__init__", navigated)


def test_the_model_picked_in_the_sidebar_stays_picked_from_page_to_page(navigation_mode, tmp_path, monkeypatch):
    from streamlit.testing.v1 import AppTest

    monkeypatch.setenv("TE_MODELS_DIR", str(tmp_path))
    at = AppTest.from_file(APP, default_timeout=90)
    at.run()
    assert at.session_state["te_current"][0].name == "shakespeare-char"  # the default
    at.sidebar.selectbox(key="te_model_name").set_value("shakespeare-bpe").run()  # one pick, on Home
    assert at.session_state["te_current"][0].name == "shakespeare-bpe"
    for page in ("pages/attention.py", "pages/training.py", "pages/generation.py", "pages/home.py"):
        at.query_params.clear()  # a page switch in the browser starts from a clean query string
        at.switch_page(page).run()
        assert not at.exception, page
        assert at.sidebar.selectbox(key="te_model_name").value == "shakespeare-bpe", page
        assert at.session_state["te_current"][0].name == "shakespeare-bpe", page
