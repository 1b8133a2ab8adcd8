"""Pages at a long prompt, where a GPT-2-sized model needs limits (issue 16): a random GPT-2 folder narrow in width
but with 4 x 16 heads and 1,024 positions, so that a prompt of 900 tokens crosses the Inside page's budget (every
head's n x n scores and weights) while staying quick to run; and the heads page's ranking behind its button. The
numbers shown are checked against the model run in the test."""
import ast
import base64
import copy
import json
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

pytest.importorskip("transformers")

from core.nn.checkpoint import load_checkpoint  # noqa: E402
from core.data.corpus import pydoc_text  # noqa: E402
from core.analysis.trace import max_trace_tokens  # noqa: E402
from tests.gpt2_folders import save_random_gpt2, small_bpe  # noqa: E402

NAME = "long-gpt2"
N = 900
ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    folder = tmp_path_factory.mktemp("models")
    _, theirs = save_random_gpt2(folder / NAME, n_layer=4, n_head=16, n_embd=32, n_positions=1024)
    with torch.no_grad():  # weights well above GPT-2's init, so that the model is far from uniform
        for p in theirs.parameters():
            if p.dim() == 2:
                p.mul_(10.0)
    theirs.save_pretrained(folder / NAME)
    tok = small_bpe()
    text = tok.decode(tok.encode(pydoc_text()[200_000:210_000])[:N])
    model, tok = load_checkpoint(folder / NAME)
    return folder, model, tok, text


def array(value) -> np.ndarray:
    """A Plotly JSON array: a plain list, or a typed array {dtype, bdata} in base64 (numpy sent as binary)."""
    if isinstance(value, dict):
        return np.frombuffer(base64.b64decode(value["bdata"]), dtype=value["dtype"]).astype(float)
    return np.array(value, dtype=float)


def page_constant(page: str, name: str):
    """A constant of a page script, read from its source (a page is a script to run, not a module to import)."""
    tree = ast.parse((ROOT / "pages" / page).read_text())
    node = next(n for n in tree.body if isinstance(n, ast.Assign) and getattr(n.targets[0], "id", None) == name)
    return eval(compile(ast.Expression(node.value), page, "eval"))


def test_inside_follows_the_last_tokens_that_fit_and_says_so(open_page, setup):
    folder, model, tok, text = setup
    ids = tok.encode(text)
    keep = max_trace_tokens(model.config, page_constant("inside.py", "TRACE_BUDGET"))
    assert 64 <= keep < len(ids)  # this prompt is cut, to a length the page can name
    at = open_page("pages/inside.py", models_dir=folder, state={"te_model_name": NAME})
    at.text_area(key="inside_prompt").input(text).run()
    assert not at.exception
    note = next(i.value for i in at.info if "This page keeps every intermediate" in i.value)
    assert f"{len(ids):,} tokens" in note and f"last {keep} tokens" in note
    # the logits shown at the last position are the model's on those last tokens alone, not on all of them
    with torch.no_grad():
        cut = model(torch.tensor([ids[-keep:]])).logits[0, -1].double().numpy()
        whole = model(torch.tensor([ids])).logits[0, -1].double().numpy()
    output = next(json.loads(c.proto.spec) for c in at.get("plotly_chart") if c.proto.id.endswith("inside_output")
                  or "inside_output" in c.proto.id)
    shown = array(output["data"][0]["y"])  # the ten largest logits, largest first
    np.testing.assert_allclose(shown, np.sort(cut)[::-1][:10], atol=1e-4)
    assert np.abs(np.sort(whole)[::-1][:10] - shown).max() > 0.05  # so the check tells the two apart
    assert at.slider(key=f"inside_pos_{keep}").max == keep


@pytest.mark.slow  # a training process or a full fit: seconds; the whole suite runs it
def test_heads_ranking_waits_for_its_button_with_the_time_said(open_page, setup, monkeypatch):
    import core.analysis.interventions

    folder, model, tok, text = setup
    ids = tok.encode(text)
    monkeypatch.setattr(core.analysis.interventions, "head_losses_cost", lambda config, n: 1e6)  # as if very slow
    at = open_page("pages/heads.py", models_dir=folder, state={"te_model_name": NAME, "heads_prompt": text})
    assert not at.exception
    said = next(m.value for m in at.markdown if "forward passes of the whole model" in m.value)
    assert "64 heads" in said and f"{len(ids):,} tokens" in said and "about" in said
    assert len(at.dataframe) == 1  # the induction table only: no ranking yet
    assert [b.label for b in at.button if b.key == "heads_rank_go"] == ["Rank every head"]
    at.button(key="heads_rank_go").click().run()
    assert not at.exception
    assert len(at.dataframe) == 2
    rank = at.dataframe[0].value.set_index("head")
    assert len(rank) == 64
    # one head's row against the model with that head's columns of W_O zeroed, run on the whole prompt
    other = copy.deepcopy(model)
    d = model.config.d_head
    with torch.no_grad():
        other.blocks[2].attn.out.weight[:, 5 * d:6 * d] = 0.0
        idx = torch.tensor([ids])
        loss = F.cross_entropy(other(idx).logits[0, :-1], idx[0, 1:]).item()
    assert rank.loc["L3 H6", "loss with it off"] == pytest.approx(loss, abs=1e-4)
    assert abs(rank.loc["L3 H6", "rise"]) > 1e-3  # the head matters, so the check can tell it from the intact model
    # once ranked, a rerun shows the ranking without asking again
    at.run()
    assert len(at.dataframe) == 2 and not [b for b in at.button if b.key == "heads_rank_go"]
    # the stripe of 1,024 positions comes pooled: blocks, no hover text per cell
    stripe = next(json.loads(c.proto.spec) for c in at.get("plotly_chart") if "period" in
                  json.loads(c.proto.spec)["layout"].get("title", {}).get("text", ""))
    assert "customdata" not in stripe["data"][0] and "blocks" in stripe["data"][0]["colorbar"]["title"]["text"]
