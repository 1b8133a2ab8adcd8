"""The attention page for a model with more heads than the grid draws at once (a random GPT-2 folder of 4 layers
x 6 heads, 24 heads): the clickable overview table, the layers drawn head by head, and how opening a head brings its
layer into the drawing."""
import base64
import json

import numpy as np
import pytest
import torch

pytest.importorskip("transformers")

from tests.gpt2_folders import save_random_gpt2  # noqa: E402

NAME = "wide-gpt2"
PROMPT = "def head(layer):\n    return layer.attention[0] + 1  # a line of Python, read by a small BPE"


@pytest.fixture(scope="module")
def models_dir(tmp_path_factory):
    folder = tmp_path_factory.mktemp("models")
    _, theirs = save_random_gpt2(folder / NAME, n_layer=4, n_head=6, n_embd=24, n_positions=128)
    theirs.set_attn_implementation("eager")  # the implementation that returns the weights
    return folder, theirs


def specs(at):
    return {c.proto.id: json.loads(c.proto.spec) for c in at.get("plotly_chart")}


def array(value) -> np.ndarray:
    if isinstance(value, dict):  # a typed array {dtype, bdata, shape} in base64
        shape = [int(s) for s in str(value.get("shape", "-1")).split(",")]
        return np.frombuffer(base64.b64decode(value["bdata"]), dtype=value["dtype"]).reshape(shape).astype(float)
    return np.array(value, dtype=float)



def test_overview_and_the_selected_heads_layer(open_page, models_dir):
    folder, theirs = models_dir
    at = open_page("pages/attention.py", models_dir=folder, state={"te_model_name": NAME})
    at.text_area(key="attn_prompt").input(PROMPT).run()
    assert not at.exception
    charts = list(specs(at).values())
    assert len(charts) == 6  # the head's panels, its score's sources, the overview table, one layer's heads, mask
    # order, head roles
    overview, grid = charts[2], charts[3]
    heat, cells = overview["data"]
    assert array(heat["z"]).shape == (4, 6) and array(cells["x"]).shape == (24,)
    assert isinstance(cells["customdata"], list) and cells["customdata"][7][:2] == [1, 1]  # what a click hands over
    # the overview's previous-token scores, against transformers' own attention weights on the same ids
    ids = at.session_state["te_current"][2].encode(PROMPT)
    with torch.no_grad():
        attn = theirs(torch.tensor([ids]), output_attentions=True).attentions  # per layer (1, h, n, n)
    prev = torch.stack([a[0].diagonal(-1, -2, -1).mean(-1) for a in attn]).numpy()
    np.testing.assert_allclose(array(heat["z"]), prev, atol=1e-4)
    # layer 1 is drawn head by head at first: six panels titled from 1
    titles = [a["text"] for a in grid["layout"]["annotations"]]
    assert titles == [f"layer 1 · head {k}" for k in range(1, 7)]
    assert at.multiselect(key="attn_grid_layers_4x6").value == [0]
    # opening a head of layer 3 in the picker draws layer 3 as well; colouring by entropy changes the table
    at.selectbox(key="attn_layer").select(2).run()
    at.radio(key="attn_overview_measure").set_value("entropy").run()
    assert not at.exception
    assert at.multiselect(key="attn_grid_layers_4x6").value == [0, 2]
    charts = list(specs(at).values())
    titles = [a["text"] for a in charts[3]["layout"]["annotations"]]
    assert titles[0] == "layer 1 · head 1" and titles[6] == "layer 3 · head 1" and len(titles) == 12
    ent = array(charts[2]["data"][0]["z"])
    expected = torch.stack([-(a[0] * a[0].clamp_min(1e-30).log()).sum(-1).mean(-1) for a in attn]).numpy()
    np.testing.assert_allclose(ent, expected, atol=1e-4)
    assert "layer 3, head 1" in charts[0]["layout"]["title"]["text"].lower()
    # no layer picked: a hint instead of the grid
    at.multiselect(key="attn_grid_layers_4x6").set_value([]).run()
    assert not at.exception and len(specs(at)) == 5
    assert any("Pick a layer" in c.value for c in at.caption)
