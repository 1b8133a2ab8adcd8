"""An SAE's folder (core.analysis.sae): saved and loaded bit for bit, and every broken or hostile folder refused by
name: the message names the file and what is wrong with it."""
import json
import os
import pickle

import pytest
import torch
from safetensors.torch import save_file

from core.analysis.sae import (CONFIG, METRICS, SAE, WEIGHTS, SAEConfig, SAEFileError, load_sae, read_metrics,
                               read_sae_config, sae_folder, save_sae, saved_sites)

SITE = "blocks.1.hook_resid_mid"


def make_sae(seed=0) -> SAE:
    g = torch.Generator().manual_seed(seed)
    sae = SAE(SAEConfig(site=SITE, d_in=8, d_sae=32, kind="topk", k=4), generator=g)
    with torch.no_grad():
        sae.b_enc.copy_(torch.randn(32, generator=g))
        sae.b_dec.copy_(torch.randn(8, generator=g))
    return sae


@pytest.fixture
def saved(tmp_path):
    sae = make_sae()
    folder = save_sae(sae, tmp_path / "sae" / SITE, {"l0": 4.0, "ce_loss_score": 0.93, "corpus": "x"})
    return folder, sae


def test_round_trip_is_bit_identical(saved):
    folder, sae = saved
    assert sorted(os.listdir(folder)) == [CONFIG, METRICS, WEIGHTS]  # no temporary file left behind
    back = load_sae(folder, site=SITE, d_in=8)
    for name, t in sae.tensors().items():
        assert torch.equal(getattr(back, name), t), name
    assert back.config == sae.config
    assert json.loads((folder / CONFIG).read_text()) == {"site": SITE, "d_in": 8, "d_sae": 32, "kind": "topk",
                                                         "k": 4, "l1": 0.0}
    assert read_metrics(folder) == {"l0": 4.0, "ce_loss_score": 0.93, "corpus": "x"}
    x = torch.randn(5, 8)
    assert torch.equal(back(x), sae(x).detach())
    assert not any(p.requires_grad for p in back.parameters())


def write_tensors(folder, tensors):
    save_file({k: v.contiguous() for k, v in tensors.items()}, str(folder / WEIGHTS))


def edit_config(folder, **changes):
    data = json.loads((folder / CONFIG).read_text())
    data.update(changes)
    for k in [k for k, v in changes.items() if v is ...]:
        del data[k]
    (folder / CONFIG).write_text(json.dumps(data))


def t(sae):
    return sae.tensors()


def corrupt_bytes(f, sae): (f / WEIGHTS).write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{not json at all")
def truncated(f, sae): (f / WEIGHTS).write_bytes((f / WEIGHTS).read_bytes()[:200])
def nan_tensor(f, sae): write_tensors(f, {**t(sae), "b_dec": torch.full((8,), float("nan"))})
def inf_tensor(f, sae): write_tensors(f, {**t(sae), "W_enc": t(sae)["W_enc"].index_fill(0, torch.tensor([2]), float("inf"))})
def wrong_shape(f, sae): write_tensors(f, {**t(sae), "W_dec": torch.zeros(32, 9)})
def missing_tensor(f, sae): write_tensors(f, {k: v for k, v in t(sae).items() if k != "b_enc"})
def extra_tensor(f, sae): write_tensors(f, {**t(sae), "W_skip": torch.zeros(8)})
def wrong_dtype(f, sae): write_tensors(f, {**t(sae), "W_enc": t(sae)["W_enc"].double()})
def pickle_weights(f, sae): (f / WEIGHTS).write_bytes(pickle.dumps(t(sae)))
def pickle_instead(f, sae):
    (f / WEIGHTS).unlink()
    torch.save(t(sae), f / "sae.pt")
def weights_link_out(f, sae):
    outside = f.parent.parent.parent / "elsewhere.safetensors"
    (f / WEIGHTS).rename(outside)
    (f / WEIGHTS).symlink_to(outside)
def config_link_out(f, sae):
    outside = f.parent.parent.parent / "elsewhere.json"
    (f / CONFIG).rename(outside)
    (f / CONFIG).symlink_to(outside)
def config_not_json(f, sae): (f / CONFIG).write_text("{ site: nope")
def config_not_object(f, sae): (f / CONFIG).write_text("[1, 2, 3]")
def config_missing(f, sae): (f / CONFIG).unlink()
def config_no_site(f, sae): edit_config(f, site=...)
def config_no_d_sae(f, sae): edit_config(f, d_sae=...)
def config_no_k(f, sae): edit_config(f, k=...)
def config_no_kind(f, sae): edit_config(f, kind=...)
def config_bad_kind(f, sae): edit_config(f, kind="jumprelu")
def config_k_too_big(f, sae): edit_config(f, k=33)
def config_bad_site(f, sae): edit_config(f, site="blocks.0.hook_resid_post/../../x")
def config_d_in_text(f, sae): edit_config(f, d_in="8")
def config_d_in_differs(f, sae): edit_config(f, d_in=9)  # the tensors' shapes no longer match the stated d_in
def config_huge(f, sae): (f / CONFIG).write_text(json.dumps({"site": SITE, "pad": "x" * 100_000}))


REFUSALS = [
    (corrupt_bytes, WEIGHTS, "not a safetensors file"), (truncated, WEIGHTS, "safetensors"),
    (nan_tensor, WEIGHTS, "b_dec holds NaN"), (inf_tensor, WEIGHTS, "W_enc holds NaN or infinite"),
    (wrong_shape, WEIGHTS, r"W_dec is F32 \(32, 9\), not F32 \(32, 8\)"),
    (missing_tensor, WEIGHTS, "holds .*not"), (extra_tensor, WEIGHTS, "W_skip"),
    (wrong_dtype, WEIGHTS, "W_enc is F64"), (pickle_weights, WEIGHTS, "not a safetensors file"),
    (pickle_instead, WEIGHTS, "missing"), (weights_link_out, WEIGHTS, "outside"),
    (config_link_out, CONFIG, "outside"), (config_not_json, CONFIG, "not readable JSON"),
    (config_not_object, CONFIG, "not a JSON object"), (config_missing, CONFIG, "missing"),
    (config_no_site, CONFIG, "lacks site"), (config_no_d_sae, CONFIG, "lacks d_sae"),
    (config_no_k, CONFIG, "lacks k"), (config_no_kind, CONFIG, "lacks kind"), (config_bad_kind, CONFIG, "kind must be one of"),
    (config_k_too_big, CONFIG, "k must be a whole number from 1 to d_sae=32"),
    (config_bad_site, CONFIG, "not a site"), (config_d_in_text, CONFIG, "d_in must be a whole number"),
    (config_d_in_differs, WEIGHTS, r"W_enc is F32 \(8, 32\), not F32 \(9, 32\)"), (config_huge, CONFIG, "larger than"),
]


@pytest.mark.parametrize("corrupt, file, reason", REFUSALS, ids=[c.__name__ for c, _, _ in REFUSALS])
def test_a_broken_folder_is_refused_by_name(saved, corrupt, file, reason):
    folder, sae = saved
    corrupt(folder, sae)
    with pytest.raises(SAEFileError, match=reason) as e:
        load_sae(folder)
    assert e.value.path == folder / file
    assert str(e.value).startswith(str(folder / file) + ": ")


def test_site_and_width_must_match(saved):
    folder, _ = saved
    with pytest.raises(SAEFileError, match=f"an SAE of {SITE}, not of blocks.0.hook_resid_post") as e:
        load_sae(folder, site="blocks.0.hook_resid_post")
    assert e.value.path == folder / CONFIG
    with pytest.raises(SAEFileError, match="its d_in is 8, but the site's vectors have 64"):
        load_sae(folder, site=SITE, d_in=64)


def test_unreadable_metrics_are_nothing_not_an_error(saved):
    folder, _ = saved
    (folder / METRICS).write_text("{ broken")
    assert read_metrics(folder) == {}
    load_sae(folder)  # the SAE itself still loads


def test_sae_folder_and_saved_sites(tmp_path, saved):
    model = tmp_path  # the saved fixture wrote tmp_path/sae/SITE
    assert sae_folder(model, SITE) == model / "sae" / SITE
    with pytest.raises(ValueError):
        sae_folder(model, "../x")
    root = model / "sae"
    for junk in ("foo", "blocks.x.hook_embed", ".hidden", "blocks.0.hook_resid_post.tmp"):
        (root / junk).mkdir()
        (root / junk / WEIGHTS).write_bytes(b"junk")
    (root / "blocks.0.hook_resid_pre").mkdir()  # a site's folder without weights
    (root / "blocks.1.hook_resid_post").write_text("a file, not a folder")
    (model / "x").mkdir()
    (model / "x" / WEIGHTS).write_bytes(b"junk")
    (root / "blocks.0.hook_mlp_out").symlink_to(model / "x", target_is_directory=True)  # a link out of sae/
    assert saved_sites(model) == [SITE]
    assert saved_sites(tmp_path / "nothing") == []


def test_read_sae_config(saved):
    folder, sae = saved
    assert read_sae_config(folder) == sae.config


def test_json_nested_too_deep_is_refused_in_words(saved):
    """60 KB of '[' is under the size cap but beyond Python's parser: refused by name, never a RecursionError."""
    folder, _ = saved
    (folder / METRICS).write_text("[" * 60_000)
    assert read_metrics(folder) == {}
    (folder / CONFIG).write_text("[" * 60_000)
    with pytest.raises(SAEFileError, match="nested too deep") as e:
        load_sae(folder)
    assert e.value.path == folder / CONFIG


def test_an_sae_too_large_to_load_again_is_refused_before_training():
    from core.features.train import SAESettings

    with pytest.raises(ValueError, match="more than the 256 MiB an SAE file may be"):
        SAESettings(d_sae=131_072).config("blocks.0.mlp.hook_post", 256)
    SAESettings(d_sae=65_536).config("blocks.0.mlp.hook_post", 256)  # 128 MiB: fine
