"""The Attention page's chance line: the induction score of a head that spreads its weight evenly over the keys a
query can see (a[i, j] = 1/(i+1) for j <= i), on the probe the page's induction scores are measured on. That probe
draws its tokens from ``probe_choices(tokenizer)`` (a BPE's whole printable tokens, not its whole vocabulary), and its
period is what those tokens and the context allow; the line must use the same period."""
import re

import pytest

from core.nn.tokenizer import CharTokenizer

FEW = 30  # drawable tokens: fewer than the probe's 50, so the period is 30, not what the whole vocabulary allows


def chance_on_page(at) -> float:
    line = next(c.value for c in at.caption if c.value.startswith("For scale:"))
    return float(re.search(r"score about ([0-9.]+) on induction", line).group(1))


def test_the_chance_line_is_uniform_attention_on_the_probe_the_scores_are_measured_on(open_page, monkeypatch):
    # the shipped character model (65 characters, 128 positions) with a tokenizer that offers the probe 30 ids only
    monkeypatch.setattr(CharTokenizer, "readable_ids", lambda self: list(range(FEW)), raising=False)
    at = open_page("pages/attention.py")
    # by hand: second-copy queries i = T .. 2T-1 (from 0) each put 1/(i+1) on the key after the earlier occurrence
    expected = sum(1 / (i + 1) for i in range(FEW, 2 * FEW)) / FEW
    whole_vocabulary = sum(1 / (i + 1) for i in range(50, 100)) / 50  # what a period of 50 would give
    assert round(expected, 3) != round(whole_vocabulary, 3)
    assert chance_on_page(at) == pytest.approx(expected, abs=5e-4)
