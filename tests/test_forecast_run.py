"""The run a forecast bets on (core.training.forecast_run): trained in the background as a one-run study on the base
study's settings, its row the one train_one gives for the same spec; a corpus other than the study's is refused."""
import pytest

from core.data.corpus import pydoc_text
from core.training.forecast_run import plan_run, start_run
from core.training.study_grid import StudyError
from core.training.study_grid import Grid, corpus_sha256, train_one
from tests.test_study_job import wait_for

pytestmark = pytest.mark.slow  # starts Python, torch and a worker: seconds


@pytest.fixture
def base(tmp_path):
    """(study.json of a micro study on Python's documentation, the corpus file)."""
    text = pydoc_text()
    corpus = tmp_path / "corpus.txt"
    corpus.write_text(text)
    grid = Grid("micro", widths=(8, 16), tokens=(2048,), n_ctx=32, batch_size=8)
    meta = {"grid": grid.to_dict(), "corpus": "pydoc", "corpus_chars": len(text), "corpus_sha256": corpus_sha256(text)}
    return meta, corpus, grid


def test_the_forecast_run_gives_the_row_train_one_gives(base):
    meta, corpus, grid = base
    plan = plan_run(meta, 1.0, 4096, [], d_model=24)
    assert plan.problem is None and plan.D == 4096 and plan.steps == 16
    job = start_run(meta, plan, corpus)
    s = wait_for(job, lambda s: s.state in ("finished", "failed"))
    assert s.state == "finished", s.message
    (row,) = s.rows
    spec = Grid("same", widths=(24,), tokens=(4096,), n_ctx=32, batch_size=8).specs(pydoc_text())[0]
    want = train_one(spec)
    assert row["N"] == want["N"] and row["D"] == want["D"] == 4096
    assert row["loss"] == pytest.approx(want["loss"], abs=1e-6)  # the same seed, kernels and batches


def test_a_corpus_other_than_the_studys_is_refused(base, tmp_path):
    meta, corpus, _ = base
    other = tmp_path / "other.txt"
    other.write_text(pydoc_text()[:-10] + "0123456789")
    with pytest.raises(StudyError, match="checksum differs"):
        start_run(meta, plan_run(meta, 1.0, 4096, [], d_model=24), other)
    too_big = plan_run(meta, 1.0, 4096 * 10**4, [], d_model=24)
    with pytest.raises(StudyError):
        start_run(meta, too_big, corpus)
