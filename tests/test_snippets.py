"""Copy as code (issue 57): each of Attention, Cause and effect, Features and Attribution graph offers a Python program
(core.views.snippets) that reproduces the view's main numbers. Each program is run in a fresh process from the
repository's root and its printed numbers are compared with the page's own (its metrics and tables, and the core
computation the page calls on the page's settings) to 1e-6. A hostile prompt (quotes, backslashes, newlines, triple
quotes) gives a program that compiles, holds the prompt as one literal, and prints the same numbers."""
import ast
import re
import subprocess
import sys

import numpy as np
import pytest
import torch

from conftest import ROOT, SHIPPED
from core.analysis import attribution as A
from core.analysis import attribution_prune as AP
from core.analysis.attention import head_attention
from core.analysis.patching import Metric, patch_heads
from core.analysis.sae import load_sae, sae_folder
from core.features.browse import site_acts, unit_off_losses
from core.analysis.transcoders import load_transcoders
from core.features.units import feature_units, neuron_units
from core.nn.checkpoint import load_checkpoint
from core.views import snippets as SN

BPE = ROOT / "assets" / "models" / "shakespeare-bpe"
SITE = "blocks.0.hook_resid_post"  # the shipped character model's SAE
HOSTILE = 'He said "stop" \\ and \'go\'\n"""\n\'\'\' end\\n"'  # quotes, a backslash, newlines, triple quotes
NUMBER = re.compile(r": ([-+]?\d+\.\d+)$")


def run(program: str) -> str:
    """The program's output, run as a user would: a fresh Python in the repository's root."""
    done = subprocess.run([sys.executable, "-c", program], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def numbers(out: str, start: str = "") -> list[float]:
    """The numbers ending the printed lines that begin with ``start``."""
    return [float(m.group(1)) for line in out.splitlines() if line.startswith(start) and (m := NUMBER.search(line))]


def named(out: str, name: str) -> float:
    return float(re.search(rf"{re.escape(name)}: ([-+]?\d+\.\d+)", out).group(1))


def code_of(at) -> str:
    """The program in the page's Copy as code box."""
    (program,) = [c.value for c in at.code if c.proto.language == "python"]
    return program


def metric(at, label: str) -> str:
    return next(m.value for m in at.metric if m.label == label)


def prompt_literal(program: str, name: str = "prompt") -> str:
    """The value the program assigns to ``name``, read as Python reads it."""
    tree = ast.parse(program)
    return next(ast.literal_eval(node.value) for node in tree.body if isinstance(node, ast.Assign)
                and getattr(node.targets[0], "id", None) == name)


# ------------------------------------------------------------------ the program's text, no process


def test_a_hostile_prompt_stays_one_literal():
    model, tok = load_checkpoint(BPE)
    ids = tok.encode(HOSTILE, errors="drop")
    text = tok.decode(ids)
    assert '"""' in text and "\\" in text and "\n" in text  # the BPE model reads every character of it
    metric_ = Metric(ids[-1], ids[0])
    programs = [SN.attention(BPE, None, tok, text, ids, 0, 1), SN.cause_effect(BPE, 3, tok, text, ids, text, ids,
                                                                                metric_),
                SN.features(BPE, None, tok, text, ids, 5, layer=1)]
    for program in programs:
        compile(program, "<snippet>", "exec")
        name = "clean" if "clean =" in program else "prompt"
        assert prompt_literal(program, name) == text
        (line,) = [n for n in ast.parse(program).body
                   if isinstance(n, ast.Assign) and getattr(n.targets[0], "id", None) == name]
        assert line.lineno == line.end_lineno  # one line: no line of the prompt became a line of code
    assert "step=3" in programs[1]
    assert "'assets/models/shakespeare-bpe'" in programs[0]  # inside the repository: named from its root


def test_ids_the_text_does_not_give_back_are_written_out():
    _, tok = load_checkpoint(BPE)
    ids = [int(i) for ch in "the king" for i in tok.encode(ch)]  # one token a character: the text merges them
    assert tok.encode(tok.decode(ids)) != ids
    program = SN.attention(BPE, None, tok, tok.decode(ids), ids, 0, 0)
    assert f"prompt_ids = {ids!r}" in program
    long = tok.encode("Long live the king! " * 8)
    program = SN.attention(BPE, None, tok, tok.decode(long), long[-10:], 0, 0)  # a page that reads the last 10
    assert "Prompt(tok, prompt, model.config.n_ctx).ids[-10:]" in program


def test_an_sae_of_this_session_only_is_said_not_written():
    _, tok = load_checkpoint(SHIPPED)
    assert SN.features(SHIPPED, None, tok, "ab", tok.encode("ab"), 3) is None
    assert SN.model_folder("/tmp") == "/tmp"  # outside the repository: as it is on this server


# ------------------------------------------------------------------ the pages' programs, run


@pytest.mark.slow
def test_attention_code_prints_the_heads_weights(open_page):
    at = open_page("attention", timeout=120)
    program = code_of(at)
    out = run(program)
    model, tok = load_checkpoint(SHIPPED)
    ids = tok.encode(prompt_literal(program), errors="drop")
    _, pattern = head_attention(model, ids, 0, 0)  # the page opens on layer 1, head 1, the last query
    got = numbers(out, "key ")
    np.testing.assert_allclose(got, pattern[-1], atol=1e-6)
    # the page's own sentence: the weight of the key the last query weighs most
    assert any(f"weight {max(got):.3f}" in md.value for md in at.markdown)


@pytest.mark.slow
def test_cause_effect_code_prints_the_measure_and_the_heads_table(open_page):
    at = open_page("cause_effect", timeout=300)
    program = code_of(at)
    out = run(program)
    state = at.session_state
    clean, corrupt = (state[k + "__ids"][1] for k in ("cause_clean", "cause_corrupt"))  # ids the example wrote
    answer = next(s.value for s in at.selectbox if s.label.startswith("Answer"))
    wrong = next(s.value for s in at.selectbox if s.label.startswith("Wrong answer"))
    model, _ = load_checkpoint(SHIPPED)
    m = Metric(int(answer), int(wrong))
    assert named(out, "M on the clean prompt") == pytest.approx(m(model, clean), abs=1e-6)
    assert named(out, "M on the corrupted prompt") == pytest.approx(m(model, corrupt), abs=1e-6)
    assert metric(at, "M on the clean prompt") == f"{named(out, 'M on the clean prompt'):.3f}"
    assert metric(at, "M on the corrupted prompt") == f"{named(out, 'M on the corrupted prompt'):.3f}"
    table = np.array([[float(v) for v in line.split(":")[1].split()] for line in out.splitlines()
                      if line.startswith("layer ")])
    np.testing.assert_allclose(table, patch_heads(model, clean, corrupt, m, what="z"), atol=1e-6)


@pytest.mark.slow
def test_features_code_prints_the_features_activations(open_page):
    at = open_page("features", timeout=300)
    program = code_of(at)
    out = run(program)
    unit = int(at.number_input(key="feat_unit").value)
    model, tok = load_checkpoint(SHIPPED)
    ids = tok.encode(prompt_literal(program), errors="drop")
    off = unit_off_losses(model, feature_units(model, load_sae(sae_folder(SHIPPED, SITE))), unit, ids)
    fired = np.sort(off.acts[off.acts > 0])[::-1][:10]
    assert len(fired) > 0  # the page opens on a feature that fires at the last position
    np.testing.assert_allclose(numbers(out, "position "), fired, atol=1e-6)
    clean, gone = (float(v) for v in re.search(r"clean: (\S+), unit off: (\S+)", out).groups())
    assert (clean, gone) == pytest.approx((off.clean.mean(), off.off.mean()), abs=1e-6)
    assert any(f"from {clean:.3f} to {gone:.3f} nats" in md.value for md in at.markdown)  # the page's sentence


@pytest.mark.slow
def test_attribution_code_prints_the_scores_and_the_edges(open_page):
    at = open_page("attribution", timeout=300)
    program = code_of(at)
    out = run(program)
    assert "logit_tokens=None" in program and "max_feature_nodes=None" in program  # the page's defaults
    model, tok = load_checkpoint(SHIPPED)
    g = A.attribution_graph(model, load_transcoders(SHIPPED, model.config), tok.encode(prompt_literal(program))[-64:])
    rep, comp = AP.scores(g)
    assert (named(out, "replacement score"), named(out, "completeness score")) == pytest.approx((rep, comp), abs=1e-6)
    assert metric(at, "Replacement score") == f"{rep:.2f}" and metric(at, "Completeness score") == f"{comp:.2f}"
    assert metric(at, "Features · edges kept").replace(" · ", ", edges kept: ") in out.replace("features kept: ", "")
    table = next(df.value for df in at.dataframe if "through" in df.value.columns)  # edges into the inspected node
    np.testing.assert_allclose(numbers(out, "from "), table["weight"].to_numpy(), atol=1e-6)


# ------------------------------------------------------------------ a hostile prompt's programs, run


@pytest.mark.slow
def test_a_hostile_prompts_programs_print_the_same_numbers():
    model, tok = load_checkpoint(BPE)
    ids = tok.encode(HOSTILE, errors="drop")
    text = tok.decode(ids)
    assert tok.encode(text) == ids  # the program tokenizes the text itself
    out = run(SN.attention(BPE, None, tok, text, ids, 1, 2, 3))
    np.testing.assert_allclose(numbers(out, "key "), head_attention(model, ids, 1, 2)[1][3, :4], atol=1e-6)

    corrupt = ids[:-1] + [ids[0]]
    m = Metric(ids[-1], ids[0])
    out = run(SN.cause_effect(BPE, None, tok, text, ids, tok.decode(corrupt), corrupt, m, "k"))
    assert named(out, "M on the clean prompt") == pytest.approx(m(model, ids), abs=1e-6)
    table = np.array([[float(v) for v in line.split(":")[1].split()] for line in out.splitlines()
                      if line.startswith("layer ")])
    np.testing.assert_allclose(table, patch_heads(model, ids, corrupt, m, what="k"), atol=1e-6)

    acts = site_acts(model, neuron_units(model, 1), torch.tensor([ids]))[0, :, 7]
    out = run(SN.features(BPE, None, tok, text, ids, 7, layer=1))
    np.testing.assert_allclose(numbers(out, "position "), np.sort(acts[acts > 0].numpy())[::-1][:10], atol=1e-6)

    tcs = load_transcoders(BPE, model.config)
    g = A.attribution_graph(model, tcs, ids)
    node = int(np.argmax(g.activations))  # a feature node, found by (layer, position, latent) in the program's graph
    out = run(SN.attribution(BPE, None, tok, text, ids, None, None, 0.8, g, node))
    assert named(out, "replacement score") == pytest.approx(AP.scores(g)[0], abs=1e-6)
    row = g.adjacency[node]
    top = row[np.argsort(-np.abs(row))[:SN.EDGES]]
    np.testing.assert_allclose(numbers(out, "from "), top[top != 0], atol=1e-6)
