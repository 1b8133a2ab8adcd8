"""The induction circuit's sentence under the score split (core.analysis.circuit.read_circuit) on hand-made tables
whose answer is known, and the Cause and effect page's small rules: a share in words, the default key, the default
sender and receiver, NaN included."""
import math

import numpy as np

from core.analysis.circuit import (CARRIES, PREVIOUS_TOKEN, default_key, path_defaults, read_circuit, read_sources,
                                   share_text)

NAN = math.nan
NAMES = ["token embedding", "position embedding", "L1 H1", "L1 H2", "L1 H3", "L1 MLP", "LN shift"]
# (L=2, h=3) previous-token scores: L1 H3 looks one token back, L1 H1 does not
PREV = np.array([[0.11, 0.05, 0.76], [0.2, 0.1, 0.01]])


def _reading(column: str, total: float):
    """A score split whose key side's largest source is ``column`` (adding ``total``), the query's the token."""
    table = np.zeros((len(NAMES), len(NAMES)))
    table[0, NAMES.index(column)] = total
    table[0, 1] = 1.0
    return read_sources(table, NAMES), total + 1.0


def test_a_large_source_that_is_no_previous_token_head_is_not_called_one():
    """The shipped model's case: L1 H1 adds most to the score but looks back 0.11 and its path restores nothing;
    path patching finds L1 H3 (0.76, 48%)."""
    reading, score = _reading("L1 H1", 7.3)
    paths = {(0, 0): -0.0001, (0, 1): 0.02, (0, 2): 0.48}
    c = read_circuit(reading, score, PREV, paths)
    assert (c.builder, c.builder_previous, c.builder_path) == ("L1 H1", 0.11, -0.0001)
    assert (c.path_head, c.path_share, c.path_previous, c.circuit) == ((0, 2), 0.48, 0.76, True)
    t = c.text
    assert "**L1 H1** adds most to this score: +7.30 of 8.30" in t
    assert "previous-token score is 0.11 (not a previous-token head); its path into the keys restores 0%" in t
    assert "Path patching finds **L1 H3** (previous-token score 0.76)" in t and "restores 48% of" in t
    assert "K-composition" in t and "different heads" in t and "-0%" not in t


def test_the_builder_that_is_the_path_head():
    reading, score = _reading("L1 H3", 5.0)
    c = read_circuit(reading, score, PREV, {(0, 0): 0.0, (0, 1): NAN, (0, 2): 0.9})   # a NaN path is skipped
    assert c.path_head == (0, 2) and c.circuit and c.builder_path == 0.9
    assert "0.76 (a previous-token head); its path into the keys restores 90%" in c.text
    assert "different heads" not in c.text


def test_no_circuit_when_the_path_head_does_not_look_back_or_carries_nothing():
    reading, score = _reading("L1 H1", 2.0)
    c = read_circuit(reading, score, PREV, {(0, 0): 0.6, (0, 1): 0.1, (0, 2): 0.0})
    assert c.path_head == (0, 0) and not c.circuit and "K-composition" not in c.text
    assert f"not a previous-token head (below {PREVIOUS_TOKEN:.2f})" in c.text
    c = read_circuit(reading, score, PREV, {(0, 0): 0.01, (0, 1): 0.0, (0, 2): CARRIES / 2})
    assert c.path_head == (0, 2) and not c.circuit and "No single earlier head's path into the keys carries the answer" in c.text
    assert "more than any other" not in c.text


def test_a_source_that_is_no_head_and_paths_that_are_missing_or_undefined():
    reading, score = _reading("L1 MLP", 3.0)
    c = read_circuit(reading, score, PREV, {})                           # a head of the first layer
    assert c.builder_previous is None and c.path_head is None and not c.circuit
    assert "**L1 MLP** adds most" in c.text and "previous-token score is" not in c.text
    assert "No head sits in an earlier layer" in c.text
    c = read_circuit(reading, score, PREV, {(0, 0): NAN, (0, 1): NAN})   # the two runs agree
    assert c.path_head is None and math.isnan(c.path_share) and "undefined" in c.text
    assert "Path patching" not in read_circuit(reading, score, PREV, None).text   # not measured: not mentioned


def test_a_share_in_words():
    assert share_text(0.558) == "56%" and share_text(1.0) == "100%" and share_text(-0.25) == "-25%"
    assert share_text(-0.0001) == "0%" and share_text(-0.0) == "0%" and share_text(-0.004) == "0%"   # never -0%
    assert share_text(NAN) == "undefined" and share_text(math.inf) == "undefined" and share_text(None) == "undefined"
    assert share_text(0.12345, 1) == "12.3%" and share_text(-0.0004, 1) == "0.0%"


def test_the_default_key_is_the_heaviest_one_nan_skipped():
    row = np.array([NAN, 0.1, 0.6, 0.3, 0.9])       # 0.9 lies after the query (i = 3): not a key it may read
    assert default_key(row, 3) == 2 and default_key(row, 4) == 4
    assert default_key(np.full(5, NAN), 3) == 3     # nothing to go by: the query itself


def test_the_default_sender_and_receiver_skip_nan():
    prev = np.array([[NAN, 0.7, 0.2], [0.9, 0.1, 0.3], [0.0, 0.0, 0.0]])
    ind = np.array([[0.99, 0.0, 0.0], [NAN, 0.1, 0.2], [0.1, 0.8, NAN]])
    # the receiver: L3 H2 (L1's 0.99 cannot receive); the sender: the most previous-token head before layer 3
    assert path_defaults(prev, ind) == ((1, 0), (2, 1))
    ind[2, 1] = NAN
    assert path_defaults(prev, ind) == ((0, 1), (1, 2))       # receiver in layer 2: the sender from layer 1 only
    assert path_defaults(np.full((2, 2), NAN), np.full((2, 2), NAN)) == ((0, 0), (1, 0))
    assert path_defaults(prev[:1], ind[:1]) is None           # one layer: no path
