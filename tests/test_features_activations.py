"""Where an SAE reads (core.analysis.sites) and what it learns from (core.features.activations): the sites a model
has, site names refused, the collected vectors against run_with_cache of the same windows, the caps, and the
held-out text (the last 10%, full windows, Python's documentation when Tiny Shakespeare is absent)."""
import pytest
import torch

import core.data.corpus as corpus
from core.features.activations import collect
from core.data.held_out import corpus_text, held_out_windows, model_held_out
from core.analysis.sites import check_site, parse_site, site_width, sites
from core.nn.config import ModelConfig
from core.nn.model import Transformer
from core.nn.tokenizer import CharTokenizer
from core.data.corpus import PYDOC_NAME, SHAKESPEARE_FILE

SITES = ["blocks.0.hook_resid_pre", "blocks.0.hook_resid_mid", "blocks.0.hook_mlp_out", "blocks.0.mlp.hook_post",
         "blocks.0.hook_resid_post", "blocks.1.hook_resid_pre", "blocks.1.hook_resid_mid", "blocks.1.hook_mlp_out",
         "blocks.1.mlp.hook_post", "blocks.1.hook_resid_post"]


def test_sites_of_the_lecture_block_and_of_one_without_mlp(tiny_model):
    assert sites(tiny_model.config) == SITES
    no_mlp = ModelConfig(vocab_size=11, n_ctx=16, d_model=24, n_heads=3, n_layers=2, mlp=False)
    assert sites(no_mlp) == ["blocks.0.hook_resid_pre", "blocks.0.hook_resid_post", "blocks.1.hook_resid_pre",
                             "blocks.1.hook_resid_post"]
    with pytest.raises(ValueError, match="no blocks.0.mlp.hook_post"):
        check_site(no_mlp, "blocks.0.mlp.hook_post")
    with pytest.raises(ValueError, match="2 blocks"):
        check_site(tiny_model.config, "blocks.2.hook_resid_post")
    assert site_width(tiny_model.config, "blocks.1.mlp.hook_post") == 96
    assert site_width(tiny_model.config, "blocks.1.hook_mlp_out") == 24


@pytest.mark.parametrize("junk", ["blocks.0.hook_resid_post/../x", "blocks.x.hook_embed", "hook_embed",
                                  "blocks.0.mlp.hook_pre", "blocks.0.attn.hook_z", "../blocks.0.hook_resid_post",
                                  "blocks.0.hook_resid_post\n", "blocks.-1.hook_resid_post", "", None, 3,
                                  ["blocks.0.hook_resid_post"], b"blocks.0.hook_resid_post"])
def test_parse_site_refuses_junk(junk):
    with pytest.raises(ValueError, match="is not a site"):
        parse_site(junk)


def test_parse_site_reads_layer_and_hook():
    assert parse_site("blocks.12.mlp.hook_post") == (12, "mlp.hook_post")


@pytest.mark.parametrize("site", SITES)
def test_collect_equals_run_with_cache(tiny_model, site):
    windows = torch.randint(11, (7, 16), generator=torch.Generator().manual_seed(0))
    got = collect(tiny_model, windows, site, batch=3)  # batches of 3: the seams between batches are tested too
    with torch.no_grad():
        _, cache = tiny_model.run_with_cache(windows, names=[site])
    want = cache[site].reshape(-1, cache[site].shape[-1])  # (W, n, width) -> (W * n, width): row w * n + t
    torch.testing.assert_close(got, want, atol=1e-6, rtol=1e-6)


def test_collect_stops_at_max_vectors_and_max_bytes(tiny_model):
    windows = torch.randint(11, (10, 16), generator=torch.Generator().manual_seed(1))
    site = "blocks.1.hook_resid_post"
    full = collect(tiny_model, windows, site)
    assert full.shape == (160, 24)
    cut = collect(tiny_model, windows, site, max_vectors=37, batch=2)
    assert torch.equal(cut, full[:37])
    by_bytes = collect(tiny_model, windows, site, max_bytes=50 * 24 * 4 + 3, batch=2)  # room for 50 vectors
    assert torch.equal(by_bytes, full[:50])


def test_held_out_windows_are_the_last_tenth_in_full_windows():
    text = "".join(chr(ord("a") + i % 26) for i in range(1000)) + "XYZ"  # 1,003 characters
    tok = CharTokenizer.from_text(text)
    held = held_out_windows(tok, text, n_ctx=16)
    tail = text[int(1003 * 0.9):]                    # the last 101 characters
    assert len(tail) == 101
    assert held.windows.shape == (6, 16)             # (101 - 1) // 16 full windows, the rest dropped
    flat = tok.decode(held.windows.reshape(-1).tolist())
    assert flat == tail[:96]
    assert tok.decode(held.targets.reshape(-1).tolist()) == tail[1:97]
    with pytest.raises(ValueError, match="fewer than one window"):
        held_out_windows(tok, text, n_ctx=200)


def test_held_out_falls_back_to_python_documentation(monkeypatch, tmp_path):
    monkeypatch.setattr(corpus, "shakespeare_path", lambda: None)
    import core.data.held_out as acts
    monkeypatch.setattr(acts, "shakespeare_path", lambda: None)
    name, text = corpus_text({"corpus": SHAKESPEARE_FILE})
    assert name == PYDOC_NAME and len(text) > 100_000
    assert corpus_text(None)[0] == PYDOC_NAME and corpus_text({"corpus": "mine.txt"})[0] == PYDOC_NAME
    tok = CharTokenizer.from_text("abcdefghijklmnopqrstuvwxyz \n")
    model = Transformer(ModelConfig(vocab_size=tok.vocab_size, n_ctx=32, d_model=16, n_heads=2, n_layers=1))
    held = model_held_out(model, tok, {"corpus": SHAKESPEARE_FILE}, max_tokens=1000)
    assert held.corpus == PYDOC_NAME and held.windows.shape[1] == 32 and 0 < held.n_tokens <= 1000


def test_held_out_falls_back_when_te_corpus_names_nothing(monkeypatch, tmp_path):
    monkeypatch.setenv(corpus.CORPUS_ENV, str(tmp_path / "absent.txt"))
    monkeypatch.setattr(corpus, "fetched_shakespeare_path", lambda: tmp_path / "also-absent.txt")
    assert corpus_text({"corpus": SHAKESPEARE_FILE})[0] == PYDOC_NAME


def test_held_out_reads_tiny_shakespeare_when_there(corpus_text):
    from core.data.held_out import corpus_text as held_corpus
    name, text = held_corpus({"corpus": SHAKESPEARE_FILE})
    assert name == SHAKESPEARE_FILE and text == corpus_text


def test_a_site_is_checked_once_and_passed_down_as_it_is(tiny_model, monkeypatch):
    import sys

    from core.analysis.sites import Site, as_site
    from core.features.train import SAESettings, memory_estimate

    site = Site.of(tiny_model.config, "blocks.1.mlp.hook_post")
    assert (site.name, site.layer, site.hook, site.width, str(site)) == (
        "blocks.1.mlp.hook_post", 1, "mlp.hook_post", 96, "blocks.1.mlp.hook_post")
    assert site.words == "block 2's MLP hidden units (after the nonlinearity)"
    assert check_site(tiny_model.config, "blocks.0.hook_resid_pre") == Site("blocks.0.hook_resid_pre", 0,
                                                                             "hook_resid_pre", 24)
    windows = torch.randint(0, 11, (3, 16), generator=torch.Generator().manual_seed(1))
    want = collect(tiny_model, windows, "blocks.1.mlp.hook_post")  # by its name, before the fakes below
    # below the edge nothing parses or lists the model's sites again: both made to fail, the Site still serves
    sites_module = sys.modules["core.analysis.sites"]
    monkeypatch.setattr(sites_module, "parse_site", lambda s: pytest.fail(f"{s} parsed again"))
    monkeypatch.setattr(sites_module, "block_hook_names", lambda c: pytest.fail("the model's sites listed again"))
    assert as_site(tiny_model.config, site) is site
    torch.testing.assert_close(collect(tiny_model, windows, site), want, rtol=0, atol=0)
    assert memory_estimate(tiny_model.config, site, 48, SAESettings(d_sae=64)) > 0
    with pytest.raises(pytest.fail.Exception):  # the fakes bite: a name would be parsed
        collect(tiny_model, windows, "blocks.1.mlp.hook_post")
