"""Every page with the shipped byte-level BPE model selected, and what each says about tokens checked against
the model's own tokenizer (ids computed here, not read from the page)."""
import json

import pytest
import torch
import torch.nn.functional as F

from conftest import ROOT, app_pages
from core.nn.checkpoint import load_checkpoint, read_config
from core.serve.fmt import visible
from attention_hooks import attention

NAME = "shakespeare-bpe"
FOLDER = ROOT / "assets" / "models" / NAME
STATE = {"te_model_name": NAME}
# our own sentences; the second, written twice and encoded again, merges at the seam: "... the k" + "ing boats"
# gives the token " king", so the second copy would not repeat the first
PROMPT = "The ferryman counts his coins by the river.\n"
SEAM = "ing boats drift past the k"


@pytest.fixture(scope="module")
def bpe():
    return load_checkpoint(FOLDER)


def words(at) -> str:
    return " ".join(str(getattr(el, "value", "")) for kind in ("markdown", "caption", "info", "warning", "error")
                    for el in at.get(kind))


def specs(at) -> list[dict]:
    return [json.loads(c.proto.spec) for c in at.get("plotly_chart")]


@pytest.mark.parametrize("page", [script for script, _ in app_pages()])
def test_every_page_renders_with_the_bpe_model(open_page, page):
    at = open_page(page, state=STATE)
    assert at.session_state["te_current"][0].name == NAME
    text = words(at)
    assert "Traceback" not in text
    for chart in specs(at):  # no axis or title of a chart about the model speaks of characters
        title = json.dumps(chart.get("layout", {}).get("title", ""))
        if "study" in title:  # the shipped scaling study is a grid of character models, whichever model is selected
            continue
        assert "character" not in json.dumps(chart.get("layout", {})), chart["layout"].get("title")


def test_home_shows_the_card_in_tokens_and_bits_per_character(open_page, bpe):
    model, tok = bpe
    at = open_page("pages/home.py", state=STATE)
    _, _, training = read_config(FOLDER)
    text = words(at)
    assert f"| validation bits per character | {training['val_bits_per_char']:.4f}" in text
    assert "nats/token" in text and "nats/char" not in text
    assert f"byte\\-level BPE \\({tok.vocab_size:,} tokens\\)" in text
    curve = next(c for c in specs(at) if "trained" in c["layout"]["title"]["text"])
    assert curve["layout"]["yaxis"]["title"]["text"] == "cross-entropy (nats per token)"
    assert (f"covers {training['val_chars_per_token']:.2f} characters on average, so its final validation loss is "
            f"{training['val_bits_per_char']:.3f} bits per character") in text


def test_attention_axes_are_the_models_tokens(open_page, bpe):
    _, tok = bpe
    at = open_page("pages/attention.py", state=STATE)
    at.text_area(key="attn_prompt").input(PROMPT).run()
    assert not at.exception
    ids = tok.encode(PROMPT)
    assert len(ids) < len(PROMPT)  # several characters per token: the axes must not be characters
    want = tok.visible_tokens(ids)
    heat = specs(at)[0]
    ticks = [a for k, a in heat["layout"].items() if k.startswith("yaxis") and a.get("ticktext")][0]["ticktext"]
    assert ticks == want, (ticks, want)
    assert f"{len(ids)} tokens" in words(at)


def test_loss_on_the_prompt_marks_where_each_token_ends(open_page, bpe):
    _, tok = bpe
    at = open_page("pages/heads.py", state=STATE)
    at.text_area(key="heads_prompt").input(PROMPT).run()
    shaded = next(str(h.proto) for h in at.get("html") if "at position 1:" in str(h.proto))
    assert shaded.count("box-shadow: inset -1px") == len(tok.encode(PROMPT)) - 1  # every token but the first


def test_repeat_my_prompt_repeats_the_ids_exactly(open_page, bpe):
    """Decoding two copies and encoding the text again would merge tokens at the seam; the page must repeat
    the ids themselves, so that the second copy is an exact repeat the model reads."""
    model, tok = bpe
    ids = tok.encode(SEAM)
    assert tok.encode(SEAM + SEAM) != ids + ids  # the trap this test is about
    at = open_page("pages/heads.py", state=STATE)
    at.text_area(key="heads_prompt").input(SEAM).run()
    at.button(key="heads_repeat").click().run()
    assert not at.exception
    assert at.text_area(key="heads_prompt").value == SEAM + SEAM
    T = len(ids)
    assert f"Your prompt is {T} tokens written twice." in words(at)
    doubled = torch.tensor([ids + ids])
    with torch.no_grad():
        loss = F.cross_entropy(model(doubled).logits[0, :-1], doubled[0, 1:], reduction="none").numpy()
    copies = at.table[0].value
    assert float(copies.iloc[0]["second copy"]) == pytest.approx(loss[T:2 * T - 1].mean(), abs=6e-4)
    assert float(copies.iloc[0]["first copy"]) == pytest.approx(loss[:T - 1].mean(), abs=6e-4)
    # an edit of the box means the text again
    at.text_area(key="heads_prompt").input(SEAM + SEAM + " ").run()
    assert "tokens written twice." not in words(at)  # the text encoded again: no exact repeat any more


def test_random_tokens_twice_are_whole_text(open_page, bpe):
    _, tok = bpe
    at = open_page("pages/heads.py", state=STATE)
    at.button(key="heads_random").click().run()
    assert not at.exception
    text = at.text_area(key="heads_prompt").value
    assert "�" not in text and "⟨" not in text  # no token that is a piece of a character
    period = int(words(at).split("Your prompt is ")[1].split(" tokens written twice")[0])
    assert period == min(50, model_ctx(tok) // 2)


def model_ctx(tok):
    return load_checkpoint(FOLDER)[0].config.n_ctx


def test_generation_shades_each_token(open_page, bpe):
    _, tok = bpe
    at = open_page("pages/generation.py", state=STATE)
    at.number_input(key="gen_new_tokens").set_value(30).run()
    assert not at.exception
    shaded = at.get("html")
    body = next(str(h.proto) for h in shaded if "box-shadow" in str(h.proto))
    assert body.count("box-shadow: inset -1px") == 30  # one span per generated token, each with its edge
    assert "30 generated tokens" in words(at) and "where each token ends" in words(at)


def test_inside_page_reads_tokens(open_page, bpe):
    _, tok = bpe
    at = open_page("pages/inside.py", state=STATE)
    at.text_area(key="inside_prompt").input(PROMPT).run()
    ids = tok.encode(PROMPT)
    n = len(ids)
    keys = at.selectbox(key=f"inside_key_{n}_{n - 1}_0_0")
    tokens = tok.token_strings(ids)
    assert [o.split(" (heaviest")[0] for o in keys.options] == [f"{j + 1} '{visible(t)}'" for j, t in enumerate(tokens)]  # from 1
    lens = next(c for c in specs(at) if c["layout"].get("xaxis2", {}).get("title", {}).get("text", "").endswith(
        "read at each position"))
    assert lens["layout"]["xaxis2"]["title"]["text"] == "the token read at each position"


def test_the_heads_page_probes_whole_tokens(open_page, bpe):
    """The probe of a BPE model draws tokens that are whole text: the losses it reports are the model's own on
    such a probe, recomputed here."""
    from core.analysis.induction import probe_period, repeat_probe
    model, tok = bpe
    readable = tok.readable_ids()
    probe = repeat_probe(tok.vocab_size, period=probe_period(model.config.n_ctx, len(readable)), choices=readable)
    assert set(probe.flatten().tolist()) <= set(readable)
    T = probe.shape[1] // 2
    with torch.no_grad():
        loss = F.cross_entropy(model(probe).logits[:, :-1].transpose(1, 2), probe[:, 1:], reduction="none")
    first = loss[:, :T - 1].mean().item()
    at = open_page("pages/heads.py", state=STATE)
    assert f"loss is {first:.2f} nats on the first copy" in words(at)


def test_one_induction_score_per_head_on_both_pages_and_in_the_training_log(open_page, tmp_path):
    """Issue 27: the Attention page, Switch heads off and the training recorder measure a BPE model's heads on
    one probe (its whole printable tokens) and report the same score for each head, the one computed here from
    the model's own pattern."""
    import base64

    import numpy as np
    from gpt2_folders import small_bpe

    from core.nn.model_store import save_checkpoint
    from core.data.corpus import pydoc_text
    from core.analysis.induction import probe_period, repeat_probe
    from core.training.recipes import TrainConfig
    from core.training.trainer import Trainer

    tok = small_bpe()
    readable = tok.readable_ids()
    assert len(readable) < tok.vocab_size  # bytes that are pieces of characters: the two probes differ
    trainer = Trainer(pydoc_text()[:20_000], dict(n_ctx=64, d_model=32, n_heads=2, n_layers=2),
                      TrainConfig(steps=1, heads_interval=1), tokenizer=tok)
    model = trainer.model
    with torch.no_grad():  # sharper attention than at initialisation: which tokens the probe holds shows in the scores
        for block in model.blocks:
            block.attn.qkv.weight.mul_(25)
    assert trainer.record_heads()  # step 0: the log's first measurement, of the weights saved below
    logged = {(r["layer"], r["head"]): r["induction"] for r in trainer.heads.rows}
    save_checkpoint(tmp_path / "tiny-bpe", model, tok)

    # the score by hand: the weight each second-copy query gives the key after its twin, on whole tokens
    model.eval()
    T = probe_period(model.config.n_ctx, len(readable))
    probe = repeat_probe(tok.vocab_size, period=T, choices=readable)
    with torch.no_grad():
        pats = np.stack([r.pattern.numpy() for r in attention(model, probe)], axis=1)  # (S, L, h, n, n)
    rows = np.arange(T, 2 * T)
    want = pats[:, :, :, rows, rows - T + 1].mean(axis=(0, -1))  # (L, h)
    full = repeat_probe(tok.vocab_size, period=T)  # the whole vocabulary: scores this test can tell apart
    with torch.no_grad():
        pats_full = np.stack([r.pattern.numpy() for r in attention(model, full)], axis=1)
    assert np.abs(pats_full[:, :, :, rows, rows - T + 1].mean(axis=(0, -1)) - want).max() > 5e-3

    state = {"te_model_name": "tiny-bpe"}
    at = open_page("pages/attention.py", models_dir=tmp_path, state=state)
    z = next(t["z"] for chart in specs(at) for t in chart["data"]  # the panel "induction score" of the roles chart
             if t.get("hovertemplate", "").startswith("induction score"))
    if isinstance(z, dict):  # a typed array {dtype, bdata, shape} in base64
        z = np.frombuffer(base64.b64decode(z["bdata"]), dtype=z["dtype"]).reshape(
            [int(s) for s in str(z["shape"]).split(",")])
    attention_page = np.asarray(z, dtype=float)
    at = open_page("pages/heads.py", models_dir=tmp_path, state=state)
    table = next(d.value for d in at.dataframe if list(d.value.columns) == ["head 1", "head 2"])  # layers x heads
    assert list(table.index) == ["layer 1", "layer 2"]
    heads_page = table.to_numpy(dtype=float)
    assert attention_page.shape == heads_page.shape == want.shape == (2, 2)
    for layer in range(2):
        for head in range(2):
            assert attention_page[layer, head] == pytest.approx(want[layer, head], abs=1e-6), (layer, head)
            assert heads_page[layer, head] == pytest.approx(want[layer, head], abs=1e-6), (layer, head)
            assert logged[layer, head] == pytest.approx(want[layer, head], abs=1e-4), (layer, head)  # 4 decimals
