"""An SAE's folder (core.analysis.sae): saved and loaded bit for bit, and every broken or hostile folder refused by
name: the message names the file and what is wrong with it."""
import json
import os
import pickle

import pytest
import torch
from safetensors.torch import save_file

from core.analysis.sae import (CONFIG, LEGACY_WEIGHTS, METRICS, SAE, SAELENS_CONFIG, WEIGHTS, SAEConfig, SAEFileError,
                               fold_input_centring, load_sae, read_metrics, read_sae_config, sae_folder, save_sae,
                               saved_sites)

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
    # no temporary file left behind; SAELens's names for the weights and its config
    assert sorted(os.listdir(folder)) == sorted([CONFIG, SAELENS_CONFIG, METRICS, WEIGHTS])
    assert (WEIGHTS, SAELENS_CONFIG) == ("sae_weights.safetensors", "cfg.json")
    back = load_sae(folder, site=SITE, d_in=8)
    for name, t in sae.tensors().items():
        assert torch.equal(getattr(back, name), t), name
    assert back.config == sae.config
    assert json.loads((folder / CONFIG).read_text()) == {"site": SITE, "d_in": 8, "d_sae": 32, "kind": "topk",
                                                         "k": 4, "l1": 0.0, "apply_b_dec_to_input": True}
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


def test_cfg_json_says_what_saelens_reads(saved, tmp_path):
    """cfg.json carries the fields SAELens 6's SAE.load_from_disk reads (architecture, sizes, k, the centring) and
    the hook it reads; a transcoder's: no centring, the hook it reads and the one it writes; a ReLU SAE is
    SAELens's "standard", a ReLU transcoder its "transcoder"."""
    folder, _ = saved
    cfg = json.loads((folder / SAELENS_CONFIG).read_text())
    assert cfg == {"architecture": "topk", "k": 4, "rescale_acts_by_decoder_norm": False, "d_in": 8, "d_sae": 32,
                   "dtype": "float32", "device": "cpu", "apply_b_dec_to_input": True, "normalize_activations": "none",
                   "reshape_activations": "none",
                   "metadata": {"sae_lens_version": "6.0.0", "hook_name": SITE, "prepend_bos": False}}
    tc = SAE(SAEConfig(site="blocks.1.hook_mlp_out", d_in=8, d_sae=32, kind="relu", k=4,
                       apply_b_dec_to_input=False, reads="blocks.1.hook_mlp_in"))
    cfg = json.loads((save_sae(tc, tmp_path / "tc") / SAELENS_CONFIG).read_text())
    assert (cfg["architecture"], cfg["d_out"], cfg["apply_b_dec_to_input"]) == ("transcoder", 8, False)
    assert cfg["metadata"]["hook_name"] == "blocks.1.hook_mlp_in"
    assert cfg["metadata"]["hook_name_out"] == "blocks.1.hook_mlp_out"
    relu = SAE(SAEConfig(site=SITE, d_in=8, d_sae=32, kind="relu", k=4))
    assert json.loads((save_sae(relu, tmp_path / "relu") / SAELENS_CONFIG).read_text())["architecture"] == "standard"


def write_old_layout(folder, sae):
    """A folder as save_sae wrote it before issue 57: sae.safetensors, a config.json without the centring field."""
    folder.mkdir(parents=True)
    save_file(sae.tensors(), str(folder / LEGACY_WEIGHTS))
    cfg = {k: v for k, v in sae.config.to_dict().items() if k not in ("apply_b_dec_to_input", "reads")}
    (folder / CONFIG).write_text(json.dumps(cfg))


def test_an_old_layout_folder_loads_and_encodes_as_before(tmp_path):
    """No field: the b_dec-centred encoder every folder had then, read as such: encodings bit-identical to
    (x - b_dec) @ W_enc + b_enc. Saving it again writes the new names and drops the old weights file."""
    sae = make_sae(3)
    folder = tmp_path / "sae" / SITE
    write_old_layout(folder, sae)
    assert saved_sites(tmp_path) == [SITE]
    back = load_sae(folder, site=SITE, d_in=8)
    assert back.config.apply_b_dec_to_input is True
    x = torch.randn(6, 8)
    pre = (x - sae.b_dec) @ sae.W_enc + sae.b_enc  # the old formula, written out
    assert torch.equal(back.pre_acts(x), pre.detach())
    assert torch.equal(back.encode(x), sae.activate(pre).detach())
    save_sae(back, folder)
    assert sorted(os.listdir(folder)) == sorted([CONFIG, SAELENS_CONFIG, WEIGHTS])
    assert torch.equal(load_sae(folder).encode(x), back.encode(x))


def test_fold_moves_the_centring_into_b_enc():
    """(x - b_dec) W + b = x W + (b - b_dec W): the folded SAE's b_enc is that, its pre-activations the same to
    float32 rounding, its other tensors untouched; an SAE already uncentred is returned as it is."""
    sae = make_sae(4)
    folded = fold_input_centring(sae)
    assert folded.config.apply_b_dec_to_input is False and sae.config.apply_b_dec_to_input is True
    W, b, c = sae.W_enc.double(), sae.b_enc.double(), sae.b_dec.double()
    want = [b[j] - sum(c[i] * W[i, j] for i in range(8)) for j in range(32)]  # by hand, in float64
    assert torch.allclose(folded.b_enc.double(), torch.stack(want), atol=1e-6)
    for name in ("W_enc", "W_dec", "b_dec"):
        assert torch.equal(getattr(folded, name), getattr(sae, name))
    x = torch.randn(50, 8)
    assert torch.allclose(folded.pre_acts(x), sae.pre_acts(x), atol=1e-5)
    assert torch.allclose(folded.pre_acts(x, [3, 7]), sae.pre_acts(x, [3, 7]), atol=1e-5)
    assert fold_input_centring(folded) is folded


def test_a_bad_centring_field_is_refused(saved):
    folder, _ = saved
    edit_config(folder, apply_b_dec_to_input="yes")
    with pytest.raises(SAEFileError, match="apply_b_dec_to_input must be true or false"):
        load_sae(folder)
