"""What the training page's live view reads off a run's status (core.views.training_view), on statuses built here
so that every number is known."""
import math
import types

import pytest

from core.views import training_view as view
from core.analysis.induction import THRESHOLD
from core.training.job_settings import JobSettings


def status(**kw):
    """A JobStatus-like record: a BPE run whose validation loss is ln 8 nats per token, 1.5 characters a token."""
    base = dict(evals=[{"step": 0, "train_loss": 5.5, "val_loss": 5.6},
                       {"step": 10, "train_loss": 2.25, "val_loss": math.log(8)}],
                units="tokens", val_chars_per_token=1.5, step=10, total_steps=20, step_losses=[5.0, 4.0, 3.0],
                tokens_per_s=1234.4, elapsed_s=65, eta_s=125, active=True, vocab_size=320, heads=[])
    return types.SimpleNamespace(**{**base, **kw})


def test_units_and_the_uniform_baseline():
    assert view.unit_word("characters") == "character" and view.unit_word("tokens") == "token"
    assert view.uniform_loss(65) == pytest.approx(4.174387)  # ln 65
    assert view.uniform_loss(1) is None


def test_nats_per_token_in_bits_per_character():
    assert view.bits_per_char(math.log(8), 1.5) == pytest.approx(2.0)  # ln 8 nats = 3 bits, over 1.5 characters
    assert view.val_bits(status()) == pytest.approx(2.0)
    assert view.val_bits(status(units="characters")) is None  # nats per character need no converting
    assert view.val_bits(status(evals=[])) is None
    note = view.bits_caption(status())
    assert "about 2.000 bits per character (÷ ln 2 ÷ 1.50 characters per token)" in note
    assert view.bits_caption(status(units="characters")) is None


def test_the_six_numbers_of_the_live_view():
    rows = view.live_metrics(status())
    assert [r[:2] for r in rows] == [("Step", "10"), ("Training loss", "2.250"), ("Validation loss", "2.079"),
                                     ("Tokens/s", "1,234"), ("Elapsed", "1:05"), ("Time left", "2:05")]
    assert rows[1][2].startswith("Nats per token, estimated")
    assert rows[2][2] == ("The same, on the held-out last 10% of the corpus. About 2.000 bits per character: "
                          "nats per token ÷ ln 2 ÷ 1.50 characters per token, the number to compare with a character "
                          "model.")
    chars = view.live_metrics(status(units="characters", evals=[], tokens_per_s=None, active=False))
    assert [r[1] for r in chars] == ["10", "–", "–", "–", "1:05", "–"]
    assert chars[2][2] == "The same, on the held-out last 10% of the corpus."
    assert chars[1][2].startswith("Nats per character")


def test_the_summary_line_of_a_run():
    line = view.run_summary("pydoc", JobSettings(), 0, 2)
    assert line == ("This run: pydoc · characters · d=64 · h=4 · L=2 · n_ctx=128 · batch 32 · Muon + AdamW, "
                    "AdamW lr 0.006 · seed 1337 · 2 CPU threads")
    bpe = JobSettings(tokenizer="bpe", bpe_vocab=512)
    assert "byte-level BPE of 512 tokens" in view.run_summary("x", bpe, 0, 1)  # not learned yet: the size asked
    assert "byte-level BPE of 300 tokens" in view.run_summary("x", bpe, 300, 1)
    assert view.run_summary("x", bpe, 300, 1).endswith("1 CPU thread")


HEADS = [dict(step=10, layer=0, head=0, induction=0.05, first_copy_loss=4.0, second_copy_loss=3.9),
         dict(step=10, layer=0, head=1, induction=0.45, first_copy_loss=4.0, second_copy_loss=3.0),
         dict(step=20, layer=0, head=0, induction=0.70, first_copy_loss=4.1, second_copy_loss=0.8),
         dict(step=20, layer=1, head=1, induction=0.70, first_copy_loss=4.1, second_copy_loss=0.8),
         dict(step=20, layer=0, head=1, induction=0.20, first_copy_loss=4.1, second_copy_loss=0.8)]


def test_the_best_head_is_taken_at_the_last_step_and_the_first_wins_a_tie():
    step, best = view.best_head(HEADS)
    assert step == 20 and (best["layer"], best["head"]) == (0, 0)


def test_the_caption_under_the_heads():
    text = view.heads_caption(status(heads=HEADS), 10, 20)
    assert text.startswith("Right: every 10 steps each head is run on a fixed probe, 8 strings of distinct random "
                           "tokens written twice. Induction score: the mean weight a token in the second copy")
    assert ("At step 20 the best head is L1 H1 (0.70); on the probe the model's loss is 4.10 nats on the first copy "
            f"and 0.80 on the second. An induction head crossed {THRESHOLD:.2f} at step 20") in text
    assert view.heads_caption(status(heads=HEADS[:1]), 10, None).endswith(f"No head has reached {THRESHOLD:.2f} yet.")


def test_the_live_figures():
    import json
    curve, heads, formed = view.live_figures(status(heads=HEADS))
    assert 0.05 < THRESHOLD <= 0.45  # so that, by hand: head (0, 1) reached it at step 10, head (0, 0) never then
    assert formed == 10
    layout = json.loads(curve.to_json())["layout"]
    assert layout["yaxis"]["title"]["text"] == "cross-entropy (nats per token)"
    ys = sorted(s["y0"] for s in layout["shapes"] if s.get("y0") == s.get("y1"))
    assert ys == [pytest.approx(math.log(320))]  # the uniform guess over 320 tokens
    assert any(s.get("x0") == 10 for s in layout["shapes"])  # the step the head formed, marked
    assert heads is not None
    curve, heads, formed = view.live_figures(status(heads=[], vocab_size=1, units="characters"))
    assert heads is None and formed is None
    layout = json.loads(curve.to_json())["layout"]
    assert not layout.get("shapes") and layout["yaxis"]["title"]["text"] == "cross-entropy (nats per character)"
