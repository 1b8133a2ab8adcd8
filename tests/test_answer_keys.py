"""The answer keys (issue 59): each shipped key folder loads like any model folder, its key.json and task.json hold
the contract's fields, and its key is checked, not asserted: clean accuracy high, the key's components switched off
(zero ablation) bring it down to chance, every other component switched off leaves at least 90 % of it, each
component and each edge of the key is needed. Tiny models: the whole file runs in seconds; building a key (training)
is the slow test."""
import json

import pytest
import torch

from core.analysis import answer_keys as K
from core.nn.checkpoint import check_checkpoint
from core.nn.model_discovery import discover_models
from core.training import answer_keys as B
from core.training.answer_key_tasks import BY_NAME, TASKS

NAMES = K.list_keys()


@pytest.fixture(scope="module")
def keys():
    return {name: K.load_key(name) for name in NAMES}


def test_six_keys_are_shipped_one_per_task():
    assert len(NAMES) >= 6
    assert set(NAMES) == {t.name for t in TASKS}


def test_the_key_folders_load_like_any_model_folder():
    entries = discover_models(K.KEYS_DIR)  # what the model picker reads, pointed at the keys' folder
    assert sorted(e.name for e in entries) == NAMES
    assert all(e.error is None for e in entries), [e.error for e in entries]
    for name in NAMES:
        config, tokenizer, training = check_checkpoint(K.KEYS_DIR / name)
        assert config.d_model <= 64 and config.n_heads <= 4 and config.n_layers <= 2  # the lecture's shape or less
        assert training["source"] == B.MADE_BY


@pytest.mark.parametrize("name", NAMES)
def test_key_and_task_files_hold_the_contract(name, keys):
    model, tokenizer, key, task = keys[name]
    c = model.config
    raw = json.loads((K.KEYS_DIR / name / K.KEY_FILE).read_text())
    assert isinstance(raw["task"], str) and raw["task"]
    assert raw["components"] and all(isinstance(n, str) for n in raw["components"])
    for n in raw["components"]:
        comp = K.parse_component(n, c)  # every name parses, and names a component this model has
        assert comp.label == n  # written as the screen writes it
    assert all(len(e) == 2 for e in raw["edges"])
    for s, t in raw["edges"]:
        K.parse_node(s, c), K.parse_node(t, c)
    # every component of the key lies on an edge, and the circuit reaches the logits
    ends = {n for e in key.edges for n in e}
    assert set(key.components) <= ends and K.OUTPUT in ends
    data = json.loads((K.KEYS_DIR / name / K.TASK_FILE).read_text())
    assert set(data) >= {"prompts", "answers"}
    assert len(data["prompts"]) == len(data["answers"]) >= 200
    for prompt, answer in zip(data["prompts"], data["answers"]):
        assert 1 <= len(prompt) <= c.n_ctx
        assert all(0 <= i < c.vocab_size for i in prompt) and 0 <= answer < c.vocab_size
    # the shipped key is the one the build command plants
    planted = BY_NAME[name]
    assert list(key.components) == planted.components and [list(e) for e in key.edges] == planted.edges


@pytest.mark.parametrize("name", NAMES)
def test_the_key_is_checked_by_switching_components_off(name, keys):
    model, _, key, task = keys[name]
    clean = K.accuracy(model, task)
    key_off = K.accuracy(model, task, off=key.components)
    others_off = K.accuracy(model, task, off=K.others(model.config, key))
    base = K.chance(task)
    assert clean >= 0.95
    assert key_off <= base + 0.05, f"{name}: {key_off:.3f} with the key off, chance {base:.3f}"
    assert others_off >= 0.9 * clean
    for comp in key.components:  # no component of the key is along for the ride
        assert K.accuracy(model, task, off=[comp]) <= 0.5 * clean, comp


@pytest.mark.parametrize("name", NAMES)
def test_every_edge_of_the_key_is_needed(name, keys):
    model, _, key, task = keys[name]
    clean = K.accuracy(model, task)
    for edge in key.edges:  # cut alone, each costs at least 40 % of the clean accuracy
        assert K.accuracy(model, task, cut=[edge]) <= 0.6 * clean, edge


def test_chance_is_the_commonest_answer():
    task = K.TaskSet(((1,), (2,), (3,), (4,)), (5, 5, 5, 6))
    assert K.chance(task) == 0.75


def test_component_names_parse_as_the_screen_writes_them():
    config = BY_NAME["induction"].config  # 2 layers of 2 heads, with MLPs
    assert K.parse_component("L1 H2") == K.Component("head", 0, 1)
    assert K.parse_component("L2 MLP") == K.Component("mlp", 1, None)
    assert K.all_components(config) == ["L1 H1", "L1 H2", "L1 MLP", "L2 H1", "L2 H2", "L2 MLP"]
    for bad in ("MLP 1", "L0 H1", "L1 H0", "l1 h1", "L1H1", "H1"):
        with pytest.raises(ValueError):
            K.parse_component(bad)
    for missing in ("L3 H1", "L1 H3"):
        with pytest.raises(ValueError):
            K.parse_component(missing, config)


def test_cutting_every_edge_out_of_a_component_is_switching_it_off(keys):
    # two routes to the same model: the cut hooks rebuild what each reader reads, the off hooks zero the source
    model, _, _, task = keys["induction"]
    idx = torch.tensor([p for p in task.prompts if len(p) == 12][:8])
    readers = ["L1 MLP", "L2 H1", "L2 H2", "L2 MLP", "logits"]
    off = model(idx, hooks=K.off_hooks(model.config, ["L1 H2"])).logits
    cut = model(idx, hooks=K.cut_hooks(model, [("L1 H2", r) for r in readers])).logits
    assert torch.allclose(off, cut, atol=1e-5)
    partial = model(idx, hooks=K.cut_hooks(model, [("L1 H2", r) for r in readers[:-1]])).logits
    assert not torch.allclose(off, partial, atol=1e-3)  # the direct path to the logits is a reader too


def test_mlp_off_is_a_zero_output_by_hand(keys):
    model, _, _, task = keys["counting"]
    idx = torch.tensor([p for p in task.prompts if len(p) == 6][:8])
    _, cache = model.run_with_cache(idx, names=["blocks.0.hook_mlp_out", "blocks.1.hook_resid_post"])
    by_hand = model.readout(cache["blocks.1.hook_resid_post"] - cache["blocks.0.hook_mlp_out"])
    # not equal in general: the second block reads the MLP's output; here only the direct path is taken away
    cut = model(idx, hooks=K.cut_hooks(model, [("L1 MLP", "logits")])).logits
    assert torch.allclose(by_hand, cut, atol=1e-5)


def test_the_build_refuses_a_folder_it_did_not_write(tmp_path, capsys):
    (tmp_path / "copy").mkdir()
    (tmp_path / "copy" / "notes.txt").write_text("mine")
    assert B.main(["build", "--only", "copy", "--out", str(tmp_path)]) == 1  # refused before any training
    assert "was not written by" in capsys.readouterr().err
    assert (tmp_path / "copy" / "notes.txt").read_text() == "mine"


@pytest.mark.slow
def test_the_build_writes_a_key_that_passes_its_checks(tmp_path):
    assert B.main(["build", "--only", "copy", "--out", str(tmp_path)]) == 0
    model, _, key, task = K.load_key("copy", root=tmp_path)
    assert K.accuracy(model, task) >= 0.95
    assert K.accuracy(model, task, off=key.components) <= K.chance(task) + 0.05
    assert B.main(["build", "--only", "copy", "--out", str(tmp_path)]) == 0  # its own folder: replaced


# --------------------------------------------------------------------------------- cut edges against a hand forward
HAND_CUTS = {  # edge sets on a random 2-layer, 2-head model; several targets of one layer with different sources
    "into a key's head": [("L1 H1", "L2 H2")],
    "from the input into the first layer": [("tokens", "L1 H2")],
    "two heads of one layer": [("L1 H1", "L2 H1"), ("L1 H2", "L2 H2"), ("tokens", "L2 H2"), ("L1 MLP", "L2 H1")],
    "into MLPs and the logits": [("L1 H2", "L1 MLP"), ("L1 MLP", "L2 MLP"), ("L2 H1", "L2 MLP"),
                                 ("L2 MLP", "logits"), ("tokens", "logits")],
    "a cut upstream changes a write downstream": [("tokens", "L1 H1"), ("L1 H1", "L2 H1"), ("L2 H1", "logits")],
}


@pytest.fixture(scope="module")
def random_model():
    from core.nn.config import ModelConfig
    from core.nn.model import Transformer
    torch.manual_seed(0)
    m = Transformer(ModelConfig(vocab_size=13, n_ctx=16, d_model=16, n_heads=2, n_layers=2, bias=True)).eval().double()
    with torch.no_grad():
        for p in m.parameters():  # biases and LayerNorm's gain and shift too: nothing sits at its init
            p.normal_(0, 1.0 if p.dim() == 2 else 0.5)
    return m


def hand_cut(model, ids, edges):
    """The logits (n, m) of ``ids`` with ``edges`` cut, written out on tests/hand_forward.py: a target head's q, k
    and v are LN1(its stream - the sources' writes) through its rows of W_QKV; a target MLP reads LN2(the stream after
    attention - the writes); the logits read the final stream - the writes. Each write is this run's."""
    from hand_forward import _act, _lin, hand_forward
    import torch.nn.functional as F
    c = model.config
    d, dh = c.d_model, c.d_head
    seen = {}  # (kind, layer) -> what this run continues with

    def write(src):  # (n, d)
        if src == K.INPUT:
            return seen[("resid", 0)]
        comp = K.parse_component(src)
        if comp.kind == "mlp":
            return seen[("mlp_out", comp.layer)]
        cols = slice(comp.head * dh, (comp.head + 1) * dh)
        return seen[("z", comp.layer)][comp.head] @ model.blocks[comp.layer].attn.out.weight[:, cols].T  # (n, d)

    def minus(stream, target):
        return stream - sum(write(s) for s, t in edges if t == target)

    def ln(x, norm):
        return F.layer_norm(x, (d,), norm.weight, norm.bias, norm.eps)

    def edit(kind, layer, t):
        block = model.blocks[min(layer, c.n_layers - 1)]
        targets = {t_ for _, t_ in edges}
        if kind in ("q", "k", "v"):
            t = t.clone()
            for h in range(c.n_heads):
                if f"L{layer + 1} H{h + 1}" in targets:
                    rows = slice("qkv".index(kind) * d + h * dh, "qkv".index(kind) * d + (h + 1) * dh)
                    u = ln(minus(seen[("resid", layer)], f"L{layer + 1} H{h + 1}"), block.ln1)
                    t[h] = u @ block.attn.qkv.weight[rows].T + block.attn.qkv.bias[rows]  # (n, d_h)
        elif kind == "mlp_out" and f"L{layer + 1} MLP" in targets:
            mid = seen[("resid", layer)] + seen[("attn_out", layer)]  # the stream after attention
            u = ln(minus(mid, f"L{layer + 1} MLP"), block.ln2)
            t = _lin(_act(c, _lin(u, block.mlp.w1)), block.mlp.w2)
        elif kind == "resid" and layer == c.n_layers:
            t = minus(t, K.OUTPUT)
        seen[(kind, layer)] = t
        return t
    return hand_forward(model, ids, edit)[0]


@pytest.mark.parametrize("case", list(HAND_CUTS))
def test_a_cut_edge_is_the_hand_written_cut(random_model, case):
    edges, ids = HAND_CUTS[case], [1, 2, 3, 4, 5, 1, 2, 3]
    with torch.no_grad():
        got = random_model(torch.tensor([ids]), hooks=K.cut_hooks(random_model, edges)).logits[0]
        plain = random_model(torch.tensor([ids])).logits[0]
    want = hand_cut(random_model, ids, edges)
    assert not torch.allclose(want, plain, atol=1e-3)  # the cut changes the answer: the comparison below can fail
    assert torch.allclose(got, want, atol=1e-9), (got - want).abs().max()


def test_an_edge_runs_only_downstream():
    model = K.load_key("induction")[0]
    for s, t in [("L2 H1", "L1 H1"), ("L1 H1", "L1 H2"), ("L1 MLP", "L1 H1"), ("logits", "L2 H1"), ("L1 H1", "tokens")]:
        with pytest.raises(ValueError, match="no edge runs"):
            K.cut_hooks(model, [(s, t)])
