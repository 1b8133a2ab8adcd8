"""The training page's induction preset really grows an induction head, near the step the page promises."""
import pytest

from core.data.corpus import read_text_file, shakespeare_path
from core.analysis.induction import THRESHOLD, formation_step
from core.training.job_settings import INDUCTION_FORMS_NEAR, INDUCTION_PRESET, JobSettings
from core.analysis.induction import HeadRecorder
from core.serve.threads import torch_threads
from core.training.trainer import Trainer

pytestmark = pytest.mark.slow


COPY_WITHIN = 300  # steps after the crossing by which the second copy's loss has halved (margins measured below)


@pytest.mark.skipif(shakespeare_path() is None, reason="needs the Tiny Shakespeare corpus (set TE_CORPUS)")
def test_preset_forms_an_induction_head_near_the_promised_step():
    """What the page promises, on a trajectory that differs from one CPU's kernels to another's: a head crosses the
    threshold near INDUCTION_FORMS_NEAR (within a factor of two either way), and copying follows it: within
    COPY_WITHIN steps of the crossing the probe's second copy costs less than half the first. Measured every 50
    steps with torch's CPU kernels forced (ATEN_CPU_CAPABILITY) on one AVX-512 machine: crossing at step 550 / 550 /
    600 for default / avx2 / avx512, the halving at the same measurement each time; another AVX-512 machine (issue
    33) crossed first and halved later, which a check of both at the one crossing step could not allow."""
    settings = JobSettings(**INDUCTION_PRESET)
    tc = settings.train_config()
    with torch_threads(2):
        trainer = Trainer(read_text_file(shakespeare_path()), settings.shape(0), tc)
        trainer.heads = HeadRecorder(trainer.model, every=50)
        limit = 2 * INDUCTION_FORMS_NEAR
        while trainer.step_num < limit and formation_step(trainer.heads.rows) is None:
            trainer.step()
        formed = formation_step(trainer.heads.rows)
        assert formed is not None, f"no head reached {THRESHOLD} in {limit} steps"
        # the page says "near step INDUCTION_FORMS_NEAR": within a factor of two either way
        assert INDUCTION_FORMS_NEAR / 2 <= formed <= limit
        while trainer.step_num < min(formed + COPY_WITHIN, tc.steps) and not _copies(trainer.heads.rows):
            trainer.step()
    rows = [(r["step"], round(r["first_copy_loss"], 3), round(r["second_copy_loss"], 3))
            for r in trainer.heads.rows if r["step"] >= formed and r["layer"] == 0 and r["head"] == 0]
    assert _copies(trainer.heads.rows), f"formed at {formed}; (step, first, second copy loss) since: {rows}"


def _copies(rows) -> bool:
    """At the last measurement, the second copy costs less than half the first (the probe's losses are the same on
    every row of one step)."""
    last = max(r["step"] for r in rows)
    r = next(r for r in rows if r["step"] == last)
    return r["second_copy_loss"] < 0.5 * r["first_copy_loss"]
