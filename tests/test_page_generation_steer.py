"""AppTest of the Generation page's "Steer with a feature": the shipped character model with its shipped SAE (alpha = 0
shows the plain text; a steered text equals greedy generation with the addition written here), a link's feature and
alpha, and the BPE model, which has no SAE and says where to train one."""
import html
import re
from pathlib import Path

import pytest
import torch

from core.analysis.sampling import generate
from core.data.held_out import model_held_out
from core.analysis.sae import load_sae
from core.features.steering import feature_scales
from core.nn.checkpoint import load_checkpoint, read_config

ROOT = Path(__file__).resolve().parent.parent
SHIPPED = ROOT / "assets" / "models" / "shakespeare-char"
SITE = "blocks.0.hook_resid_post"
N = 30


def steer_page(open_page, query=None, state=None):
    at = open_page("pages/generation.py", query=query, state=state)
    at.number_input(key="gen_new_tokens").set_value(N)
    at.number_input(key="gen_cont_tokens").set_value(10)
    at.radio(key="gen_mode").set_value("greedy")
    at.text_input(key="gen_temps").set_value("0")
    at.run()
    assert not at.exception, at.exception
    return at


def sides(at) -> tuple[str, str]:
    """The generated characters of the plain and the steered column, read back from their shaded HTML."""
    bodies = [el.proto.body for el in at.get("html") if "font-size: 13px" in el.proto.body and "<span title=" in el.proto.body]
    def chars(body):
        spans = re.findall(r'<span title="[^"]*" style="[^"]*">(.*?)</span>', body)
        return "".join(html.unescape(s.replace("⏎<br>", "\n")) for s in spans)
    plain, steered = bodies[0], bodies[1]  # the steering section's two columns come before the continuations
    return chars(plain), chars(steered)


@pytest.mark.skipif(not (SHIPPED / "sae" / SITE).is_dir(), reason="the shipped SAE is not in this checkout")
def test_steering_with_the_shipped_sae(open_page):
    at = steer_page(open_page)
    assert any(h.value == "Steer with a feature" for h in at.header)
    assert any(r"\alpha\, s_i\, \mathbf{d}_i" in el.value for el in at.latex)
    assert at.selectbox(key="gen_steer_sae").value == f"saved: {SITE}"
    feature = at.number_input(key="gen_steer_feature").value
    at.slider(key="gen_steer_alpha").set_value(0.0).run()
    plain, steered = sides(at)
    assert len(plain) == N and steered == plain
    assert "identical" in " ".join(c.value for c in at.caption)

    at.slider(key="gen_steer_alpha").set_value(6.0).run()
    assert not at.exception, at.exception
    plain2, steered = sides(at)
    assert plain2 == plain and steered != plain
    # the same text from greedy generation with the addition written here: alpha * s_i * W_dec[feature]
    model, tok = load_checkpoint(SHIPPED)
    sae = load_sae(SHIPPED / "sae" / SITE)
    held = model_held_out(model, tok, read_config(SHIPPED)[2], max_tokens=64 * model.config.n_ctx)
    s_i = feature_scales(model, sae, held.windows).scale(feature)  # (checked against a hand count: test_steering)
    assert f"sᵢ = {s_i:.3g}" in " ".join(m.value for m in at.markdown)
    added = 6.0 * s_i * sae.W_dec[feature].detach()
    ids = tok.encode(at.text_area(key="gen_prompt").value)
    out = generate(model, torch.tensor(ids), N, 0.0, hooks=[(SITE, lambda x, name: x + added)])
    assert steered == tok.decode(out[len(ids):].tolist())


@pytest.mark.skipif(not (SHIPPED / "sae" / SITE).is_dir(), reason="the shipped SAE is not in this checkout")
def test_a_link_sets_feature_and_alpha_and_a_bad_feature_is_named(open_page):
    at = steer_page(open_page, query={"feature": "3", "alpha": "-2.5"})
    assert at.number_input(key="gen_steer_feature").value == 3
    assert at.slider(key="gen_steer_alpha").value == -2.5
    at = open_page("pages/generation.py", query={"feature": "100000"})  # the first run reads the link
    assert "is not one of this autoencoder's 0 to 511" in " ".join(i.value for i in at.info)


def test_a_model_without_an_sae_says_where_to_train_one(open_page):
    at = steer_page(open_page, state={"te_model_name": "shakespeare-bpe"})
    assert any(h.value == "Steer with a feature" for h in at.header)
    assert any("no sparse autoencoder yet" in i.value and "Features page" in i.value for i in at.info)
    assert not at.get("slider") or all(s.key != "gen_steer_alpha" for s in at.slider)
