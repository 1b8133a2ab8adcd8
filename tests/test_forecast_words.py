"""The forecast on Your scaling law counts D in characters, as its study does (issue 55): the proposal and the plan
say "characters", with the numbers the law gives, worked out here from the shipped fit."""
import json
import re
from types import SimpleNamespace

import pytest

from core.analysis.scaling import ScalingLaw
from core.training.study_files import SHIPPED_STUDY, read_rows
from core.views import scaling_forecast as vf

LAW = ScalingLaw(**json.loads((SHIPPED_STUDY / "fit.json").read_text())["law"])
ROWS = read_rows(SHIPPED_STUDY / "runs.csv")
META = json.loads((SHIPPED_STUDY / "study.json").read_text())
SCALE = {"k": 1e3, "M": 1e6, "B": 1e9, "T": 1e12}


def test_the_proposal_and_the_plan_count_characters():
    prop = vf.proposal(LAW, SimpleNamespace(meta=META, rows=ROWS), ROWS)
    C = 2 * max(6 * r["N"] * r["D"] for r in ROWS)
    G = (LAW.alpha * LAW.A / (LAW.beta * LAW.B)) ** (1 / (LAW.alpha + LAW.beta))
    d_opt = C / 6 / (G * (C / 6) ** (LAW.beta / (LAW.alpha + LAW.beta)))
    d = re.search(r"D = ([\d.]+)([kMBT]?) (\w+)", prop.note)
    assert d, prop.note
    assert float(d.group(1)) * SCALE.get(d.group(2), 1) == pytest.approx(d_opt, rel=5e-3)
    assert d.group(3) == "characters" and "tokens" not in prop.note
    note = vf.plan_note(prop.plan, prop)
    assert f"D = {prop.plan.D:,} characters" in note and "tokens" not in note and "e+" not in note
