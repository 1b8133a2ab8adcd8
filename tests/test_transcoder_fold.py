"""Issue 57: a transcoder's encoder is x @ W_enc + b_enc (no b_dec on its input), as SAELens's and circuit-tracer's
are. The shipped transcoders were folded once, b_enc <- b_enc - b_dec @ W_enc; the attribution graph on the
Attribution page's default prompt is the same with the folded weights as with the b_dec-centred ones they came from,
and a folder of the old layout still loads and encodes as it did."""
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import save_file

from core.analysis import attribution as A
from core.analysis.sae import CONFIG, LEGACY_WEIGHTS, SAE, SAELENS_CONFIG, WEIGHTS
from core.analysis.transcoders import load_transcoders, reads, transcoder_folder
from core.nn.checkpoint import load_checkpoint

ROOT = Path(__file__).resolve().parent.parent
CHAR = ROOT / "assets" / "models" / "shakespeare-char"
DEFAULT = "Long live the king! Long live the queen! Long live the k"  # pages/attribution.py's DEFAULT


def unfolded(tc: SAE) -> SAE:
    """The b_dec-centred transcoder ``tc`` was folded from: b_enc_old = b_enc + b_dec @ W_enc (float64), centring on."""
    from dataclasses import replace

    old = SAE(replace(tc.config, apply_b_dec_to_input=True, reads=None))
    with torch.no_grad():
        for name, t in tc.tensors().items():
            getattr(old, name).copy_(t)
        old.b_enc.copy_((tc.b_enc.double() + tc.b_dec.double() @ tc.W_enc.double()).float())
    return old.requires_grad_(False).eval()


@pytest.fixture(scope="module")
def shipped():
    model, tok = load_checkpoint(CHAR)
    return model.eval(), tok, load_transcoders(CHAR, model.config)


def test_the_shipped_transcoders_are_folded(shipped):
    model, _, tcs = shipped
    for layer, tc in tcs.items():
        assert tc.config.apply_b_dec_to_input is False and tc.config.reads == reads(layer)
        folder = transcoder_folder(CHAR, layer)
        assert (folder / WEIGHTS).is_file() and not (folder / LEGACY_WEIGHTS).exists()  # one copy of the weights
        cfg = json.loads((folder / SAELENS_CONFIG).read_text())
        assert cfg["apply_b_dec_to_input"] is False and cfg["metadata"]["hook_name"] == reads(layer)
        x = torch.randn(7, model.config.d_model)
        assert torch.equal(tc.pre_acts(x), x @ tc.W_enc + tc.b_enc)  # circuit-tracer's encode, SAELens's Transcoder's


def test_the_graph_on_the_default_prompt_is_unchanged_by_the_fold(shipped):
    """Built with the folded transcoders and with the b_dec-centred ones: the same features, targets and logits,
    and every edge, input and constant equal to 1e-6 of the array's largest value. (Measured when the shipped files
    were folded, against the files as they were: at most 1.2e-6 on edges up to 6.1, 2.4e-6 on activations up to
    8.9, i.e. 1 to 3 float32 ulps: x @ W + b' and (x - b_dec) @ W + b round differently, so 1e-6 absolute is below
    what float32 can hold at that size.)"""
    model, tok, tcs = shipped
    ids = tok.encode(DEFAULT)
    old = {layer: unfolded(tc) for layer, tc in tcs.items()}
    x = torch.randn(5, model.config.d_model, generator=torch.Generator().manual_seed(1))
    assert (old[0].b_enc - tcs[0].b_enc).abs().max() > 0.1  # the fold moved b_enc: the comparison can fail
    torch.testing.assert_close(old[0].pre_acts(x), tcs[0].pre_acts(x), atol=1e-5, rtol=0)
    g_new, g_old = A.attribution_graph(model, tcs, ids), A.attribution_graph(model, old, ids)
    assert np.array_equal(g_new.features, g_old.features) and g_new.logit_tokens == g_old.logit_tokens
    assert g_new.n_features > 50
    for name in ("adjacency", "inputs", "constants", "activations", "logit_probs", "logits"):
        a, b = getattr(g_new, name), getattr(g_old, name)
        assert np.abs(a - b).max() <= 1e-6 * max(np.abs(b).max(), 1.0), name
    # and the fold is what makes it so: the folded b_enc with the centring still on is another graph
    wrong = {layer: unfolded(tc) for layer, tc in tcs.items()}
    for layer, tc in wrong.items():
        with torch.no_grad():
            tc.b_enc.copy_(tcs[layer].b_enc)
    assert not torch.allclose(wrong[0].pre_acts(x), tcs[0].pre_acts(x), atol=1e-2)


def test_an_old_layout_transcoder_folder_encodes_as_before(shipped, tmp_path):
    """A transcoders/layer-L/ written before issue 57 (sae.safetensors, no apply_b_dec_to_input, no reads) loads
    through load_transcoders as the b_dec-centred transcoder it is: the field is read (absent: centred), nothing is
    folded on load, and its encodings are bit-identical to (x - b_dec) @ W_enc + b_enc."""
    model, _, tcs = shipped
    (tmp_path / "config.json").write_text("{}")  # a model folder's place; load_transcoders reads only transcoders/
    olds = {}
    for layer, tc in tcs.items():
        old = olds[layer] = unfolded(tc)
        folder = transcoder_folder(tmp_path, layer)
        folder.mkdir(parents=True)
        save_file(old.tensors(), str(folder / LEGACY_WEIGHTS))
        cfg = {k: v for k, v in old.config.to_dict().items() if k != "apply_b_dec_to_input"}
        (folder / CONFIG).write_text(json.dumps(cfg))
    back = load_transcoders(tmp_path, model.config)
    x = torch.randn(40, model.config.d_model, generator=torch.Generator().manual_seed(2))
    for layer, tc in back.items():
        assert tc.config.apply_b_dec_to_input is True and tc.config.reads is None
        o = olds[layer]
        pre = (x - o.b_dec) @ o.W_enc + o.b_enc
        assert torch.equal(tc.pre_acts(x), pre) and torch.equal(tc.encode(x), o.activate(pre))
        assert torch.equal(tc.encode(x) > 0, tcs[layer].encode(x) > 0)  # and the same features as the folded one
