"""Zoomed attention: every softmax is taken over whole rows, then cut to the window (issue 12).

On today's main the unmasked panel took its softmax over the window's columns only, so its cells
differed by up to 0.98 from the whole-row values; here they are checked against a forward pass of the
shipped model computed in the test with torch, independently of core.analysis.attention."""
import base64
import json
from pathlib import Path

import numpy as np
import torch

from core.nn.checkpoint import load_checkpoint
from attention_hooks import attention

ROOT = Path(__file__).resolve().parent.parent
SHIPPED = ROOT / "assets" / "models" / "shakespeare-char"
PROMPT = ("Every head of this model reads the line before it, and a learner can zoom into any stretch "
          "of a long prompt to see it.")
LO, HI = 10, 57


def array(value) -> np.ndarray:
    """A Plotly JSON array: a plain (nested) list, or a typed array {dtype, bdata, shape} in base64."""
    if isinstance(value, dict):
        shape = [int(s) for s in str(value.get("shape", "-1")).split(",")]
        return np.frombuffer(base64.b64decode(value["bdata"]), dtype=value["dtype"]).reshape(shape).astype(float)
    return np.array(value, dtype=float)


def test_zoomed_unmasked_panel_uses_whole_rows(open_page):
    assert len(PROMPT) == 118
    at = open_page("pages/attention.py")
    at.text_area(key="attn_prompt").input(PROMPT).run()
    at.slider(key="attn_window").set_range(LO + 1, HI + 1).run()  # the slider counts from 1
    at.toggle(key="attn_unmasked").set_value(True).run()
    at.selectbox(key="attn_layer").select(1).run()
    at.selectbox(key="attn_head").select(2).run()
    assert not at.exception
    specs = [json.loads(c.proto.spec) for c in at.get("plotly_chart")]
    panels, bars = specs[0], specs[1]
    unmasked = array(panels["data"][3]["z"])
    weights = array(panels["data"][2]["z"])

    model, tok = load_checkpoint(SHIPPED)
    with torch.no_grad():
        rec = attention(model, torch.tensor([tok.encode(PROMPT)]))[1]
    scores = rec.scores[0, 2].double()                                   # (118, 118), future included
    whole_rows = torch.softmax(scores, dim=-1)                           # no mask, whole rows
    future = torch.ones(118, 118, dtype=torch.bool).triu(1)
    masked = torch.softmax(scores.masked_fill(future, float("-inf")), dim=-1)
    win = slice(LO, HI + 1)
    assert unmasked.shape == (48, 48)
    np.testing.assert_allclose(unmasked, whole_rows[win, win].numpy(), atol=1e-4)
    keep = ~np.isnan(weights)
    np.testing.assert_allclose(weights[keep], masked[win, win].numpy()[keep], atol=1e-4)
    # the bars beside it: weight on the future, over whole rows
    np.testing.assert_allclose(array(bars["data"][0]["y"]), (whole_rows * future).sum(-1)[win].numpy(), atol=1e-4)
    # and the window's own softmax would differ: the panel is not that
    window_only = torch.softmax(scores[win, win], dim=-1).numpy()
    assert np.abs(window_only - unmasked).max() > 0.05
