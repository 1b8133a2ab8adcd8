"""Issue 60's trims of a decoding step: greedy tokens without the T = 0 distribution, the key/value cache written
through per-layer views, and HookRun's answers kept per run. Each against values worked out independently. Fast lane."""
import math

import torch

from core.analysis.sampling import _draw, generate, greedy, next_token_distribution
from core.nn.config import ModelConfig
from core.nn.hooks import HookRun
from core.nn.model import Transformer

NAN, INF = math.nan, math.inf


def test_greedy_takes_the_first_of_the_largest_as_drawing_at_t0_does():
    cases = [([1.0, 3.0, 3.0, 0.0], 1),          # a tie: the first of the tied maxima
             ([-2.0, -1.0, -5.0], 1),
             ([1.0, NAN, 3.0], 0),               # a NaN: no maximum compares equal, token 0 (as the T = 0 draw)
             ([-INF, -INF, -INF], 0),            # nothing allowed: uniform at T = 0, its first entry
             ([INF, 1.0, INF], 0),
             ([0.0, 0.0, 7.5, 7.5, 7.5], 2)]
    z = torch.tensor([row + [-INF] * (5 - len(row)) for row, _ in cases])  # (6, 5), padded with -inf
    assert greedy(z).tolist() == [want for _, want in cases]
    assert greedy(z).tolist() == _draw(next_token_distribution(z, 0.0), 0.0, None).tolist()


def test_greedy_generation_is_the_argmax_of_the_full_forward_at_every_step():
    """generate at T = 0 (the greedy shortcut, the cache's per-layer views) against the textbook loop written here:
    the whole sequence through the model, the argmax of the last logits appended."""
    torch.manual_seed(0)
    model = Transformer(ModelConfig(vocab_size=11, n_ctx=16, d_model=16, n_heads=2, n_layers=2)).eval()
    idx = torch.randint(0, 11, (2, 3))
    out = generate(model, idx, 13, temperature=0.0)  # fills the context: every step reads the cache
    seq = idx
    with torch.no_grad():
        for _ in range(13):
            seq = torch.cat([seq, model(seq).logits[:, -1].argmax(-1, keepdim=True)], dim=1)
    assert torch.equal(out, seq)


def test_hookrun_answers_wants_any_for_its_own_hooks_only_and_alike_when_asked_again():
    run = HookRun([("blocks.0.hook_resid_post", lambda x, name: x)])
    names = ("hook_resid_pre", "hook_resid_post")
    for _ in range(2):  # the second answer is the kept one
        assert run.wants_any("blocks.0.", names) is True
        assert run.wants_any("blocks.1.", names) is False
    assert run.wants_any("blocks.0.", list(names)) is True  # a list (not kept) is answered too
    assert run.wants_any("blocks.0.", ("hook_attn_out",)) is False


def test_a_hookrun_that_records_nothing_keeps_nothing_and_one_that_records_keeps_its_names():
    x = torch.ones(1, 2, 3)
    plain = HookRun([("a", lambda t, name: t + 1)])
    assert torch.equal(plain("a", x), x + 1) and plain("b", x) is x and plain.store == {}
    rec = HookRun([("a", lambda t, name: t * 2)], names=["a", "c"], record=True)
    rec("a", x), rec("b", x), rec("c", x)
    assert sorted(rec.store) == ["a", "c"] and torch.equal(rec.store["a"], x * 2)
