"""Issue 45's formulas against hand computations and the papers' own numbers: the interval score, effective data and
parameters, the data-constrained optimum (Muennighoff et al.'s worked example), inference-aware sizing; and the
forecast machinery: the batched bootstrap against one fit per resample, intervals, the proposer, calibration."""
import math

import numpy as np
import pytest

from core.analysis import forecast as F
from core.analysis.scaling import (ScalingLaw, effective_data, effective_params, fit_scaling_law, huber_objective,
                                   interval_score, start_grid)
from core.analysis.scaling_inference import (data_for_loss, famous_inference_table, inference_optimal,
                                             lifetime_flops, smallest_model)
from core.analysis.scaling_repeat import (MUENNIGHOFF_2023, WORKED_EXAMPLE, epoch_worth, epochs_curve,
                                          epochs_worth_it, profile_r_star, repeated_loss, repeated_optimum,
                                          unique_params)


# ---------------------------------------------------------------- the interval score
@pytest.mark.parametrize("y, want", [(1.5, 1.0), (1.0, 1.0), (2.0, 1.0),  # inside or on a bound: the width
                                     (0.5, 1.0 + 10 * 0.5),  # 2/alpha = 10 per unit below the lower bound
                                     (3.0, 1.0 + 10 * 1.0)])
def test_interval_score_by_hand(y, want):
    assert interval_score(1.0, 2.0, y) == pytest.approx(want)


def test_interval_score_other_alpha_and_arrays():
    # alpha = 0.5: 2/alpha = 4; [0, 1] with y = 2 -> 1 + 4
    assert interval_score(0.0, 1.0, 2.0, alpha=0.5) == pytest.approx(5.0)
    out = interval_score([1, 1], [2, 2], [0, 2.5])
    assert out.tolist() == pytest.approx([11.0, 6.0])
    with pytest.raises(ValueError):
        interval_score(2.0, 1.0, 1.5)


def test_a_wider_interval_that_catches_the_run_can_score_better():
    # the point of a proper score: a narrow miss costs more than an honest width
    assert interval_score(1.9, 2.0, 2.2) > interval_score(1.8, 2.3, 2.2)


# ---------------------------------------------------------------- effective data and parameters
def test_effective_data_by_hand():
    # four passes: R = 3 repetitions; D' = U + U 15.4 (1 - e^(-3/15.4))
    assert effective_data(1.0, 4.0) == pytest.approx(1 + 15.4 * (1 - math.exp(-3 / 15.4)))
    assert effective_data(2e9, 1e9) == pytest.approx(1e9)  # under one pass nothing repeats
    assert effective_data(1.0, 1.0) == pytest.approx(1.0)
    assert effective_data(1.0, 1e9) == pytest.approx(1 + 15.4, rel=1e-6)  # the ceiling U (1 + R*)
    assert effective_params(1.0, 3.0) == pytest.approx(1 + 5.3 * (1 - math.exp(-2 / 5.3)))
    assert effective_data(1.0, 4.0, r_star=1.0) == pytest.approx(1 + (1 - math.exp(-3)))


@pytest.mark.parametrize("epochs, worth", [(4, 0.93), (16, 0.66)])
def test_effective_data_matches_the_papers_reading(epochs, worth):
    # Muennighoff et al.: four epochs are almost as good as fresh data; by sixteen a third of the tokens are wasted
    assert effective_data(1.0, float(epochs)) / epochs == pytest.approx(worth, abs=0.005)


def test_epoch_worth_and_the_half_point():
    assert epoch_worth(1) == pytest.approx(1.0)
    assert epoch_worth(1 + 15.4) == pytest.approx(math.exp(-1))
    assert epochs_worth_it() == pytest.approx(1 + 15.4 * math.log(2))
    # the marginal worth is the derivative of D' in D (per unique token): a finite difference of effective_data
    h = 1e-6
    assert (effective_data(1.0, 6.0 + h) - effective_data(1.0, 6.0 - h)) / (2 * h) == pytest.approx(epoch_worth(6.0),
                                                                                                     rel=1e-5)


def test_unique_params_is_the_optimum_whose_data_is_the_stock():
    law = ScalingLaw(A=400, B=900, alpha=0.3, beta=0.4, E=1.7)
    u = 3e10
    n = unique_params(law, u)
    n_opt, d_opt = law.compute_optimal(6 * n * u)
    assert n_opt == pytest.approx(n, rel=1e-9) and d_opt == pytest.approx(u, rel=1e-9)


def test_the_papers_worked_example():
    """Muennighoff et al.: the compute of 8.67B parameters on 178B tokens with 25B unique tokens is best spent on
    6.8B parameters and 227B tokens (9.1 epochs) under their fitted law."""
    w = WORKED_EXAMPLE
    n, d = repeated_optimum(MUENNIGHOFF_2023, 6 * w["N"] * w["D"], w["unique"])
    assert n == pytest.approx(w["N_opt"], rel=0.01) and d == pytest.approx(w["D_opt"], rel=0.01)
    assert d / w["unique"] == pytest.approx(9.1, abs=0.05)
    # with plenty of unique data the constrained optimum is the plain one
    n2, d2 = repeated_optimum(MUENNIGHOFF_2023, 6 * w["N"] * w["D"], 1e15)
    n3, d3 = MUENNIGHOFF_2023.compute_optimal(6 * w["N"] * w["D"])
    assert n2 == pytest.approx(n3, rel=1e-4) and d2 == pytest.approx(d3, rel=1e-4)


def test_repeated_loss_by_hand_and_the_epochs_curve():
    law = ScalingLaw(A=1.0, B=1.0, alpha=0.5, beta=0.5, E=1.0)  # G = 1: U_N = U
    # N below U_N: N' = N; D = 3U: D' = U + 15.4 U (1 - e^(-2/15.4))
    u, n = 100.0, 50.0
    d_eff = u + 15.4 * u * (1 - math.exp(-2 / 15.4))
    assert float(repeated_loss(law, n, 3 * u, u)) == pytest.approx(1 + n ** -0.5 + d_eff ** -0.5)
    # N above U_N = 100: N' = 100 + 5.3 * 100 (1 - e^(-1/5.3)) for N = 200
    n_eff = u + 5.3 * u * (1 - math.exp(-1 / 5.3))
    assert float(repeated_loss(law, 200.0, 3 * u, u)) == pytest.approx(1 + n_eff ** -0.5 + d_eff ** -0.5)
    c = epochs_curve(law, n, u, [1, 4, 16])
    assert c["fresh"][0] == pytest.approx(c["repeated"][0])  # one pass: nothing repeated
    assert np.all(c["repeated"][1:] > c["fresh"][1:])  # repeats are worth less than fresh text


# ---------------------------------------------------------------- inference-aware sizing
HAND = ScalingLaw(A=1.0, B=1.0, alpha=0.5, beta=0.5, E=0.0)


def test_data_for_loss_and_smallest_model_by_hand():
    # target 0.3 with N = 100: 0.1 from N, 0.2 left for D -> D = 25
    assert data_for_loss(HAND, 100.0, 0.3) == pytest.approx(25.0)
    assert smallest_model(HAND, 0.3) == pytest.approx(1 / 0.09)
    assert math.isinf(data_for_loss(HAND, 5.0, 0.3))  # 1/sqrt(5) = 0.447 > 0.3: no data is enough
    with pytest.raises(ValueError):
        inference_optimal(HAND, 0.0, 1.0)


def test_without_inference_it_is_the_compute_optimal_model():
    """D_inf = 0: least training FLOPs for a loss is the Chinchilla optimum for the budget whose best loss it is.
    For the hand law (A = B, alpha = beta = 1/2) the optimum has N = D and loss 2/sqrt(N): N = (2/L)^2."""
    r = inference_optimal(HAND, 0.02, 0.0)
    assert r["N"] == pytest.approx(1e4, rel=1e-6) and r["D"] == pytest.approx(1e4, rel=1e-6)
    law = ScalingLaw(A=406.4, B=410.7, alpha=0.34, beta=0.28, E=1.69)
    C = 1e23
    n, d = law.compute_optimal(C)
    r = inference_optimal(law, float(law.optimal_loss(C)), 0.0)
    assert r["N"] == pytest.approx(n, rel=1e-5) and r["total_flops"] == pytest.approx(C, rel=1e-8)


def test_inference_optimum_against_a_brute_force_scan():
    # cost(N) = 6 N D(N) + 2 N D_inf on a dense grid of N: the least is the function's answer
    target, d_inf = 0.02, 3e4
    n = np.geomspace(smallest_model(HAND, target) * 1.0001, 1e7, 400_001)
    cost = lifetime_flops(n, data_for_loss(HAND, n, target), d_inf)
    r = inference_optimal(HAND, target, d_inf)
    assert r["N"] == pytest.approx(n[np.argmin(cost)], rel=1e-3)
    assert r["total_flops"] == pytest.approx(cost.min(), rel=1e-7)
    assert r["N"] < 1e4 and r["tokens_per_param"] > 1.0  # smaller and trained longer than Chinchilla's N = D


def test_more_serving_means_smaller_models_trained_longer():
    law = ScalingLaw(A=406.4, B=410.7, alpha=0.34, beta=0.28, E=1.69)
    target = float(law.loss(70e9, 1.4e12))
    sizes = [inference_optimal(law, target, v) for v in (0.0, 1e11, 1e12, 1e13)]
    assert all(a["N"] > b["N"] for a, b in zip(sizes, sizes[1:]))
    assert all(a["tokens_per_param"] < b["tokens_per_param"] for a, b in zip(sizes, sizes[1:]))
    rows = famous_inference_table(law, 2e12)
    for row in rows:
        assert row["best_total"] <= row["chinchilla_total"] * (1 + 1e-9)  # least lifetime cost by construction
        assert row["best_total"] <= row["own_total"] * (1 + 1e-9)
        assert float(law.loss(row["best_N"], row["best_D"])) == pytest.approx(row["loss"], rel=1e-9)


# ---------------------------------------------------------------- the bootstrap in one batch
def runs_from(law, n=14, noise=0.01, seed=3):
    rng = np.random.default_rng(seed)
    N = 10 ** rng.uniform(4, 6, n)
    D = 10 ** rng.uniform(5.5, 7, n)
    return N, D, law.loss(N, D) * np.exp(noise * rng.standard_normal(n))


TRUE = ScalingLaw(A=5.0, B=3000.0, alpha=0.25, beta=0.6, E=1.3)


def test_batched_bootstrap_equals_one_fit_per_resample():
    """Each resample of the batch (weights = how often each run was drawn) lands where an ordinary fit to the
    resampled runs, rows repeated, lands from the same starts: the weighting trick is the resample."""
    N, D, L = runs_from(TRUE)
    law = fit_scaling_law(N, D, L)
    boot = F.bootstrap_laws(N, D, L, law, resamples=2, seed=7)
    assert boot.failed == 0 and boot.params.shape == (2, 5)
    import torch
    starts = torch.cat([torch.tensor([[math.log(law.A), math.log(law.B), math.log(law.E), law.alpha, law.beta]],
                                     dtype=torch.float64), start_grid()[::F.GRID_STEP]])
    for s in range(2):
        idx = np.repeat(np.arange(len(N)), boot.counts[s])
        one = fit_scaling_law(N[idx], D[idx], L[idx], starts=starts, polish=1)
        grid = np.array([[1e4, 3e5], [1e6, 1e7], [3e5, 3e6]])
        mine = ScalingLaw(*boot.params[s])
        # The same minimum, and no worse a one, up to where L-BFGS stops. Seed 7's first resample pins no floor: its
        # objective falls towards an infimum as E -> 0 (log E -> -inf), and where a fit stops on that slope follows
        # the rounding of the float32 pass, so the CPU's kernels (issue 55): under ATEN_CPU_CAPABILITY=default the
        # batched fit stops at E = 0.0035 and the single one at E = 6e-13, their predictions 2.1e-5 apart (relative)
        # and their objectives 1.4e-4 (relative); under avx2 and avx512 8e-9 and 1e-13 (seeds 0-7, 2 resamples each).
        # rel=2e-4 on the predictions holds that by 10x and stays 50x below the runs' 1 % scatter; 5e-4 on the
        # objective holds it by 3.6x while the nearest other end point of a full-grid fit to this resample, 1.05e-3
        # worse, still fails.
        assert mine.loss(grid[:, 0], grid[:, 1]) == pytest.approx(one.loss(grid[:, 0], grid[:, 1]), rel=2e-4)
        best = huber_objective(one, N[idx], D[idx], L[idx])
        assert huber_objective(mine, N[idx], D[idx], L[idx]) <= best * (1 + 5e-4)
        # the residuals are each resample's own
        assert boot.residuals[s] == pytest.approx(np.log(L) - np.log(mine.loss(N, D)))


def test_forecast_intervals_from_a_hand_made_bootstrap():
    law = ScalingLaw(A=1.0, B=1.0, alpha=0.5, beta=0.5, E=1.0)
    # five resamples whose laws differ only in E: predictions 1 + 0.1 + 0.1 + (E - 1)
    Es = np.array([0.9, 0.95, 1.0, 1.05, 1.1])
    params = np.array([[1.0, 1.0, 0.5, 0.5, e] for e in Es])
    boot = F.Bootstrap(params=params, residuals=np.zeros((5, 3)), counts=np.ones((5, 3), int), failed=0)
    fc = F.forecast(law, boot, 100.0, 100.0, level=0.5)
    preds = np.log(0.2 + Es)
    assert fc.point == pytest.approx(1.2)
    assert fc.law_lower == pytest.approx(math.exp(np.percentile(preds, 25)))
    assert fc.law_upper == pytest.approx(math.exp(np.percentile(preds, 75)))
    # no scatter in the runs: the forecast interval is the law's
    assert (fc.lower, fc.upper) == pytest.approx((fc.law_lower, fc.law_upper))
    # scatter of +-0.1 in log loss widens it (the five laws four times over: a 90 % interval needs 20)
    boot2 = F.Bootstrap(params=np.tile(params, (4, 1)), residuals=np.tile([-0.1, 0.0, 0.1], (20, 1)),
                        counts=np.ones((20, 3), int), failed=0)
    wide = F.forecast(law, boot2, 100.0, 100.0, level=0.9)
    assert wide.lower < fc.law_lower and wide.upper > fc.law_upper


@pytest.mark.parametrize("kept, failed", [(0, 200), (3, 197), (9, 0)])
def test_a_forecast_from_too_few_resamples_is_refused_in_words(kept, failed):
    """None kept was an IndexError; 3 kept was shown as an 80 % interval (issue 55): both ends were extreme laws."""
    law = ScalingLaw(A=1.0, B=1.0, alpha=0.5, beta=0.5, E=1.0)
    params = np.array([[1.0, 1.0, 0.5, 0.5, 1.0 + 0.01 * i] for i in range(kept)]).reshape(kept, 5)
    boot = F.Bootstrap(params=params, residuals=np.zeros((kept, 3)), counts=np.ones((kept, 3), int), failed=failed)
    from core.analysis.scaling import FitError
    with pytest.raises(FitError, match=rf"Only {kept} of {kept + failed} bootstrap resamples.*at least 10"):
        F.forecast(law, boot, 100.0, 100.0)
    ten = F.Bootstrap(params=np.tile(params[:1] if kept else [[1.0, 1.0, 0.5, 0.5, 1.0]], (10, 1)),
                      residuals=np.zeros((10, 3)), counts=np.ones((10, 3), int), failed=failed)
    assert F.forecast(law, ten, 100.0, 100.0).point == pytest.approx(1.2)  # one beyond each end: shown


def test_the_fewest_resamples_put_one_beyond_each_end():
    assert [F.min_resamples(v) for v in (0.5, 0.8, 0.9, 0.95)] == [4, 10, 20, 40]


def test_score_by_hand():
    s = F.score(1.5, 1.7, 1.6, 1.8)
    assert s["hit"] is False and s["interval_score"] == pytest.approx(0.2 + 10 * 0.1)
    assert s["log_error"] == pytest.approx(math.log(1.8 / 1.6))
    assert F.score(1.5, 1.7, 1.6, 1.6)["hit"] is True


def test_propose_on_a_law_whose_optimum_is_known():
    # A = B, alpha = beta: G = 1, so N_opt = D_opt = sqrt(C / 6)
    law = ScalingLaw(A=2.0, B=2.0, alpha=0.4, beta=0.4, E=1.0)
    n, d = F.propose(law, [6e10, 6e12, 3e11])
    assert n == pytest.approx(math.sqrt(2e12)) and d == pytest.approx(math.sqrt(2e12))
    n, d = F.propose(law, [6e12], factor=4.0)
    assert n * d == pytest.approx(4e12)


def test_holdout_keeps_the_small_runs():
    N = np.array([1.0, 10.0, 100.0, 1000.0])
    D = np.array([1.0, 1.0, 1.0, 1.0])
    assert F.holdout(N, D, N, fit_share=0.5).tolist() == [True, True, False, False]


@pytest.mark.slow  # the heaviest of its file: seconds
def test_calibration_on_a_noiseless_law_hits_and_its_hits_recount():
    N, D, L = runs_from(TRUE, n=16, noise=0.0)
    cal = F.calibration(N, D, L, F.holdout(N, D, L), resamples=10)
    assert cal["held_out"] == 5 and cal["fitted"] == 11
    for r in cal["rows"]:
        assert r["point"] == pytest.approx(r["loss"], rel=1e-4)  # the law is recovered: no error to speak of
        assert r["lower"] <= r["point"] * (1 + 1e-8) and r["point"] <= r["upper"] * (1 + 1e-8)
    again = F.summary(cal["rows"])
    assert again["hits"] == sum(r["lower"] <= r["loss"] <= r["upper"] for r in cal["rows"]) == cal["hits"]
    assert again["law_hits"] == sum(r["law_lower"] <= r["loss"] <= r["law_upper"] for r in cal["rows"])


@pytest.mark.slow  # six full fits
def test_profile_finds_the_r_star_the_runs_were_made_with():
    law = ScalingLaw(A=5.0, B=3000.0, alpha=0.25, beta=0.6, E=1.3)
    rng = np.random.default_rng(0)
    u = 1e6
    N = np.repeat([1e4, 3e4, 1e5, 3e5], 5)
    D = np.tile([3e5, 1e6, 3e6, 1e7, 3e7], 4)
    L = law.loss(N, effective_data(u, D, 4.0)) * np.exp(0.002 * rng.standard_normal(len(N)))
    prof = profile_r_star(N, D, L, u, r_stars=(1.0, 2.0, 4.0, 8.0, 16.0, 64.0))
    best = min(prof, key=lambda p: p["objective"])
    assert best["r_star"] == 4.0


# ---------------------------------------------------------------- helpers of the pages and the shipped analysis
def test_the_vectorised_optima_match_one_at_a_time():
    from core.analysis.scaling_repeat import repeated_optima

    law = ScalingLaw(A=406.4, B=410.7, alpha=0.34, beta=0.28, E=1.69)
    Cs = np.geomspace(1e20, 1e26, 7)
    n, d = repeated_optima(law, Cs, 3e11)
    for c, a, b in zip(Cs, n, d):
        n1, d1 = repeated_optimum(law, c, 3e11)
        assert a == pytest.approx(n1, rel=0.01) and a * b == pytest.approx(c / 6, rel=1e-9)


def test_the_shipped_forecast_json_is_read_and_a_tampered_one_refused(tmp_path):
    import json
    import shutil

    from core.training.forecast_study import FORECAST_JSON, read_forecast
    from core.training.study_files import SHIPPED_STUDY
    from core.training.study_grid import StudyError

    data = read_forecast(SHIPPED_STUDY)
    rows = data["calibration"]["rows"]
    assert data["calibration"]["hits"] == sum(r["lower"] <= r["loss"] <= r["upper"] for r in rows)
    assert read_forecast(tmp_path) is None  # none there: nothing to show, no error
    shutil.copy(SHIPPED_STUDY / FORECAST_JSON, tmp_path / FORECAST_JSON)
    bad = json.loads((tmp_path / FORECAST_JSON).read_text())
    bad["calibration"]["hits"] += 1  # counts that the rows do not add up to
    (tmp_path / FORECAST_JSON).write_text(json.dumps(bad))
    with pytest.raises(StudyError, match="do not add up"):
        read_forecast(tmp_path)
    (tmp_path / FORECAST_JSON).write_text("[1, 2")
    with pytest.raises(StudyError):
        read_forecast(tmp_path)


def test_doubling_gains_by_hand():
    from core.training.forecast_study import doubling_gains

    rows = [{"d_model": 8, "epochs": e, "loss": l, "train_loss": t}
            for e, l, t in ((1.0, 3.0, 3.0), (3.0, 2.0, 1.9), (6.0, 1.8, 1.6), (12.0, 1.75, 1.5))]
    g = doubling_gains(rows)[8]  # runs of under two passes are not a doubling of passes: left out
    assert [(s["from"], s["to"]) for s in g] == [(3.0, 6.0), (6.0, 12.0)]
    assert [s["gain"] for s in g] == pytest.approx([0.2, 0.05]) and g[-1]["gap"] == pytest.approx(0.25)


def test_plan_run_maps_the_law_to_a_run_and_holds_the_limits():
    import json

    from core.training.forecast_run import MAX_FORECAST_EPOCHS, plan_run, width_params
    from core.training.study_files import SHIPPED_STUDY, read_rows

    meta = json.loads((SHIPPED_STUDY / "study.json").read_text())
    rows = read_rows(SHIPPED_STUDY / "runs.csv")
    assert width_params(meta, 64) == next(r["N"] for r in rows if r["d_model"] == 64)  # as the study counted it
    p = plan_run(meta, width_params(meta, 72) * 1.01, 500_000, rows)
    assert p.d_model == 72 and p.D == round(500_000 / 1024) * 1024 and p.problem is None
    assert p.epochs == pytest.approx(p.D / int(meta["corpus_chars"] * 0.9))
    many = plan_run(meta, 1e4, (MAX_FORECAST_EPOCHS + 2) * meta["corpus_chars"], rows)
    assert "passes over the corpus" in many.problem
    slow = plan_run(meta, 1.0, 20_000_000, rows, d_model=256)
    assert "minutes" in slow.problem


def test_settle_and_the_session_record():
    from core.views import scaling_forecast as vf

    rec = {"base": "b", "point": 2.0, "lower": 1.9, "upper": 2.1, "law_lower": 1.95, "law_upper": 2.05, "level": 0.8,
           "your_point": 2.0, "your_lower": 1.5, "your_upper": 2.5, "actual": None, "row": None}
    done = vf.settle(rec, {"loss": 2.02, "N": 1, "D": 1})
    assert done["law_hit"] and done["narrow_hit"] and done["your_hit"]
    assert done["law_score"] == pytest.approx(0.2) and done["your_score"] == pytest.approx(1.0)
    summ = vf.record_summary([done, rec])  # the unsettled one is not counted
    assert summ["n"] == 1 and "The law forecasts better" in vf.winner(summ)
    assert vf.joined_rows([done, rec], "b") == [{"loss": 2.02, "N": 1, "D": 1}] and vf.joined_rows([done], "x") == []
    assert vf.bet_problem(2.0, 1.9, 2.1) is None
    assert "hold the point" in vf.bet_problem(2.0, 2.05, 2.1)
    assert "above zero" in vf.bet_problem(float("nan"), 1.0, 2.0)


def test_the_verdicts_follow_the_numbers():
    from core.views import scaling_forecast as vf

    rows = [{"lower": 1, "upper": 2, "loss": 1.5, "log_error": -0.01}] * 10
    cal = {"rows": rows, "level": 0.8, "law_hits": 4, "hits": 5, "mean_abs_log_error": 0.01}
    assert "too narrow" in vf.calibration_verdict(cal)
    assert "wider than they need be" in vf.calibration_verdict({**cal, "hits": 10})
    assert "about right" in vf.calibration_verdict({**cal, "hits": 8})
    assert "1.0 % lower" in vf.bias_sentence(cal)
    assert "equally well" in vf.forms_verdict({"plain_rms_held": 0.0100, "effective_rms_held": 0.0101})
    assert "L(N, D′) forecasts them better" in vf.forms_verdict({"plain_rms_held": 0.02, "effective_rms_held": 0.01})


def test_both_forms_on_runs_made_with_repetition():
    """Runs drawn from L(N, D') with R* = 4 on a small stock: the form that knows repetition forecasts the held-out
    (larger, more repeated) runs better than the plain law."""
    from core.views.scaling_view import forms_csv
    from core.analysis.scaling_runs import Runs

    law = ScalingLaw(A=5.0, B=3000.0, alpha=0.25, beta=0.6, E=1.3)
    u = 1e6
    N = np.repeat([1e4, 3e4, 1e5, 3e5], 5)
    D = np.tile([3e5, 1e6, 3e6, 1e7, 3e7], 4)
    L = law.loss(N, effective_data(u, D, 15.4))
    out = forms_csv(Runs(N, D, L).to_csv(), int(u))
    assert sum(r["held_out"] for r in out["rows"]) == 6  # the larger 30 % by compute
    assert out["effective_rms_held"] < 0.2 * out["plain_rms_held"]


def test_the_notes_of_the_law_page():
    from core.views import scaling_use as su

    law = ScalingLaw(A=406.4, B=410.7, alpha=0.34, beta=0.28, E=1.69)
    plenty = su.constrained(law, 1e22, 1e14)
    assert "never runs out of fresh text" in su.constrained_note(plenty) and plenty.N == pytest.approx(plenty.N_plain,
                                                                                                        rel=1e-3)
    short = su.constrained(law, 1e24, 1e11)
    assert short.loss_plain_repeated > short.loss_plain_fresh and short.loss <= short.loss_plain_repeated
    assert "passes" in su.constrained_note(short)
    chin, best = su.sizing(law, 1.95, 1e13)
    assert "saves" in su.sizing_note(chin, best, 1e13) and best["N"] < chin["N"]
    assert "0.82 on the fourth" in su.worth_caption()  # e^(-3/15.4)
    assert "6.8B on 9.1 passes" in su.split_caption()


def test_the_epochs_grid_may_repeat_and_others_may_not():
    from core.training.study_grid import GRIDS, MAX_EPOCHS, corpus_problem

    text = "x" * 1_200_000  # a Tiny Shakespeare-sized text: 1,080,000 training characters
    assert corpus_problem(GRIDS["epochs"], text) is None  # 24 passes, allowed up to 32
    assert "epochs" not in GRIDS["full"].to_dict() and "max_epochs" not in GRIDS["full"].to_dict()
    assert GRIDS["epochs"].to_dict()["max_epochs"] == 32
    small = "x" * 600_000
    msg = corpus_problem(GRIDS["full"], small)
    assert f"at most {MAX_EPOCHS} times" in msg and "--grid epochs" not in msg


@pytest.mark.slow
def test_the_shipped_analysis_is_made_again_from_runs_csv():
    """forecast.json is what python -m core.forecast_study makes from the two studies' runs.csv (no corpus needed):
    the calibration and the two forms made again in full, the R* profile at its best value and two others."""
    from core.training import forecast_study as FS
    from core.training.study_files import SHIPPED_STUDY

    shipped = FS.read_forecast(SHIPPED_STUDY)
    _, full = FS._rows(SHIPPED_STUDY)
    _, epochs = FS._rows(FS.EPOCHS_STUDY)
    unique = shipped["unique_tokens"]
    cal = FS.calibrate(full)
    for a, b in zip(shipped["calibration"]["rows"], cal["rows"]):
        assert a["run_id"] == b["run_id"] and a["hit"] == b["hit"]
        # the point is one fit from all 4,500 starts: the same to 4e-10 on every CPU kernel (ATEN_CPU_CAPABILITY).
        # The interval ends are percentiles of 200 refits, each of which may stop anywhere on a slope with no
        # minimum (a resample that pins no floor, E -> 0) where the kernels' rounding puts it, and the held-out runs
        # are extrapolations: under default kernels one end moved by 1.6e-4 against the file (made under avx2/512,
        # which reproduce it exactly), so 1e-3: a change of method (seed, resamples, level) moves them by percents
        assert a["point"] == pytest.approx(b["point"], rel=1e-6)
        for k in ("lower", "upper", "law_lower", "law_upper"):
            assert a[k] == pytest.approx(b[k], rel=1e-3), k
    forms = FS.compare_forms(full, epochs, unique)
    assert shipped["forms"]["plain_rms_held"] == pytest.approx(forms["plain_rms_held"], rel=1e-6)
    assert shipped["forms"]["effective_rms_held"] == pytest.approx(forms["effective_rms_held"], rel=1e-6)
    N, D, L = FS._arrays(full + epochs)
    stored = {p["r_star"]: p["objective"] for p in shipped["r_star"]["profile"]}
    picks = sorted(stored)[::13] + [shipped["r_star"]["best"]]
    for p in profile_r_star(N, D, L, unique, r_stars=picks):
        assert p["objective"] == pytest.approx(stored[p["r_star"]], rel=1e-6)
    assert shipped["epochs"] == FS.epochs_table(full, epochs, unique)
