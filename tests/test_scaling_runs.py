"""core.analysis.scaling_runs: CSV validation names the problem; good files in any reasonable shape are read."""
import numpy as np
import pytest

from core.analysis.scaling import CHINCHILLA
from core.analysis.scaling_runs import MAX_BYTES, MAX_RUNS, MIN_RUNS, RunsError, parse_runs, synthetic_runs

GOOD = synthetic_runs(CHINCHILLA, n=12, noise=0.0, seed=0)


def csv_of(rows, header="N,D,loss"):
    return "\n".join([header] + [",".join(str(v) for v in r) for r in rows]) + "\n"


def test_round_trip_of_a_good_csv():
    runs = parse_runs(GOOD.to_csv().encode())
    assert len(runs) == 12 and not runs.warnings
    np.testing.assert_allclose(runs.N, GOOD.N, rtol=1e-5)
    np.testing.assert_allclose(runs.loss, GOOD.loss, rtol=1e-6)


def test_aliases_column_order_delimiters_suffixes_comments_and_bom():
    text = "\ufeff# my runs\nval_loss;tokens;params\n" + "\n".join(
        f"{l};{d / 1e9:.3f}B;{n / 1e6:.2f}M" for n, d, l in zip(GOOD.N, GOOD.D, GOOD.loss))
    runs = parse_runs(text.encode("utf-8"))
    np.testing.assert_allclose(runs.N, GOOD.N, rtol=1e-3)
    np.testing.assert_allclose(runs.D, GOOD.D, rtol=1e-3)


def test_headerless_three_columns_and_whitespace_separated():
    text = "\n".join(f"{n} {d} {l}" for n, d, l in zip(GOOD.N, GOOD.D, GOOD.loss))
    runs = parse_runs(text)
    assert len(runs) == 12


@pytest.mark.parametrize("data, words", [
    (b"", "empty"),
    (b"   \n\n", "empty"),
    (b"N,loss\n1e9,2.5\n", "Missing column D"),
    (b"model,size,score\na,b,c\n", "Missing columns N, D, loss"),
    (csv_of([(1e9, 1e10, 2.5)] * 3).encode(), "Only 3 runs"),
    (csv_of([(1e9, 1e10, 2.5)] * 9 + [("abc", 1e10, 2.5)]).encode(), "line 11: N = 'abc' is not a number"),
    (csv_of([(1e9, 1e10, 2.5)] * 9 + [(1e9, 0, 2.5)]).encode(), "line 11: D = 0 must be a positive"),
    (csv_of([(1e9, 1e10, 2.5)] * 9 + [(1e9, 1e10, -1)]).encode(), "loss = -1 must be a positive"),
    (csv_of([(1e9, 1e10, 2.5)] * 9 + [(1e9, 1e10, "nan")]).encode(), "must be a positive finite"),
    (csv_of([(1e9, 1e10, 2.5)] * 9 + [(1e9,)]).encode(), "line 11: no D"),
    (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR", "binary"),
    (b"N,D,loss\n\xff\xfe1,2,3\n", "not UTF-8"),
])
def test_bad_files_get_a_message_naming_the_problem(data, words):
    with pytest.raises(RunsError, match=words.replace("(", r"\(")):
        parse_runs(data)


def test_many_bad_rows_are_summarised():
    rows = [(1e9, 1e10, 2.5)] * 5 + [(1e9, 1e10, "x")] * 6
    with pytest.raises(RunsError, match=r"and 3 more"):
        parse_runs(csv_of(rows))


def test_huge_uploads_and_too_many_runs_are_refused():
    with pytest.raises(RunsError, match="MB"):
        parse_runs(b"N,D,loss\n" + b"1e9,1e10,2.5\n" * (MAX_BYTES // 13 + 10))
    with pytest.raises(RunsError, match="too many"):
        parse_runs(csv_of([(1e9, 1e10, 2.5)] * (MAX_RUNS + 1)))
    with pytest.raises(RunsError, match="too long"):
        parse_runs("x" * (MAX_BYTES + 1))


LONG = 199_000  # one field this long: past the csv module's field limit (131,072 characters)


@pytest.mark.parametrize("text, line", [
    ("N,D,loss\n" + "1e9,1e10,2.5\n" * 9 + "1e9,1e10," + "9" * LONG + "\n", 11),  # a number far too long
    ("N,D,loss\n" + "1e9,1e10,2.5\n" * 9 + '1e9,1e10,"' + "x" * LONG + '"\n', 11),  # quoted text
    ("N;D;loss\n" + "1e9;1e10;" + "x" * LONG + "\n", 2),  # another delimiter
    ("N,D," + "x" * LONG + "\n", 1),  # in the header
])
def test_a_field_past_the_csv_limit_gets_a_message(text, line):
    with pytest.raises(RunsError, match=f"Line {line} has a field longer than 131,072 characters") as e:
        parse_runs(text)
    assert len(str(e.value)) < 300  # the message names the problem, it does not repeat the field


@pytest.mark.parametrize("text", ["x" * LONG, "N D " + "x" * LONG, "x" * LONG + " y z"])
def test_a_huge_header_is_not_repeated_in_the_message(text):
    with pytest.raises(RunsError, match="Missing column") as e:
        parse_runs(text)
    assert len(str(e.value)) < 300


def test_warnings_for_data_that_cannot_pin_the_law_down():
    rows = [(n, 1e10, l) for n, l in zip(GOOD.N, GOOD.loss)]  # a single D
    runs = parse_runs(csv_of(rows))
    assert any(w.startswith("D takes fewer than three distinct values") for w in runs.warnings)
    rows = [(n, d, 100 * l) for n, d, l in zip(GOOD.N, GOOD.D, GOOD.loss)]
    assert any("perplexities" in w for w in parse_runs(csv_of(rows)).warnings)


def test_synthetic_runs_follow_the_law():
    """Real noise, checked against the law written out here: the log residuals are the noise, N(0, 0.05^2)."""
    law, noise = CHINCHILLA, 0.05
    runs = synthetic_runs(law, n=2000, noise=noise, seed=2)
    assert len(runs) == 2000 >= MIN_RUNS
    truth = law.A / runs.N**law.alpha + law.B / runs.D**law.beta + law.E
    r = np.log(runs.loss) - np.log(truth)
    assert abs(r.mean()) < 4 * noise / np.sqrt(len(r))  # standard error 0.0011
    assert np.std(r, ddof=1) == pytest.approx(noise, rel=0.05)  # standard error of the std about 1.6 %
    assert abs(np.mean(r**3)) / noise**3 < 0.2  # symmetric, as log-normal noise on the loss is
    # Chinchilla's range: 70M to 16B parameters, 5B to 500B tokens, spread evenly in log
    assert 7e7 <= runs.N.min() < 7.5e7 and 1.5e10 < runs.N.max() <= 1.6e10
    assert 5e9 <= runs.D.min() < 5.5e9 and 4.6e11 < runs.D.max() <= 5e11
    assert np.median(np.log10(runs.N)) == pytest.approx((np.log10(7e7) + np.log10(1.6e10)) / 2, abs=0.1)
