"""The scaling page's arithmetic and rules, now in core (scaling_view, scaling_study, fmt): each checked against
numbers worked out by hand or by another method (a brute-force search along the budget line, a model's own
parameter count), never against the function's own output."""
import math
from types import SimpleNamespace

import numpy as np
import pytest
from core.figures.study_figures import UNFITTED
from core.views import scaling_study as ss

from core.views import scaling_view as sv
from core.serve.fmt import g3, number_word, rough_time
from core.nn.config import ModelConfig
from core.nn.model import Transformer
from core.analysis.scaling import CHINCHILLA, EPOCH_2024, FAMOUS_MODELS, N_STARTS, FitError, ScalingLaw, start_grid
from core.analysis.scaling_runs import MIN_RUNS, parse_runs
from core.jobs import JobBusy
from core.training.study_job import ACTIVE, STATES


def brute_optimum(law: ScalingLaw, C: float) -> tuple[float, float]:
    """(N, D) of the lowest loss on a fine log grid along 6ND = C: no closed form, no Lagrange."""
    N = np.logspace(0, 16, 400_001)
    L = law.loss(N, C / (6 * N))
    n = float(N[np.argmin(L)])
    return n, C / (6 * n)


# ---------------------------------------------------------------- core.serve.fmt

@pytest.mark.parametrize("seconds, words", [(3, "about 10 seconds"), (44, "about 40 seconds"),
                                            (89, "about 90 seconds"), (90, "about 2 minutes"),
                                            (1140, "about 19 minutes")])
def test_rough_time_says_seconds_up_to_a_minute_and_a_half(seconds, words):
    assert rough_time(seconds) == words


def test_three_significant_digits_with_a_zero_for_a_vanished_bound():
    assert g3(0.053214) == "0.0532" and g3(1.4297) == "1.43" and g3(16700.4) == "1.67e+04"
    assert g3(1e-9) == "0" and g3(-3e-7) == "0" and g3(2e-6) == "2e-06"


def test_small_counts_are_words_and_larger_ones_digits():
    assert [number_word(n) for n in (0, 1, 8, 12)] == ["zero", "one", "eight", "twelve"]
    assert number_word(13) == "13" and number_word(4500) == "4,500"


# ---------------------------------------------------------------- core.analysis.scaling additions

def test_the_two_exponents_of_the_optimum_add_to_one():
    assert CHINCHILLA.D_exponent == pytest.approx(0.34 / 0.62) and CHINCHILLA.N_exponent == pytest.approx(0.28 / 0.62)
    for law in (CHINCHILLA, EPOCH_2024):
        assert law.N_exponent + law.D_exponent == pytest.approx(1.0)


def test_the_fit_starts_from_every_point_of_the_grid():
    assert N_STARTS == start_grid().shape[0] == 6 * 6 * 5 * 5 * 5  # a, b in 0..25 by 5; e, alpha, beta 5 values


def test_famous_models_tokens_per_parameter():
    chin = next(m for m in FAMOUS_MODELS if m.name == "Chinchilla")
    assert chin.tokens_per_param == pytest.approx(1.4e12 / 70e9) == pytest.approx(20.0)
    assert sv.CHINCHILLA_MODEL is chin


# ---------------------------------------------------------------- sliders

def test_slider_positions_of_the_chinchilla_constants():
    # log10 406.4 = 2.60895..., log10 410.7 = 2.61352...: three decimals on the log sliders, four on the others
    assert sv.slider_values(CHINCHILLA) == {"scal_logA": 2.609, "scal_logB": 2.614, "scal_alpha": 0.34,
                                            "scal_beta": 0.28, "scal_E": 1.69}
    assert not sv.sliders_clip(CHINCHILLA) and not sv.sliders_clip(EPOCH_2024)


def test_constants_off_the_sliders_are_clipped_and_said_to_be():
    wild = ScalingLaw(A=10 ** 8.1, B=5.0, alpha=2.0, beta=0.005, E=6.0)
    assert sv.slider_values(wild) == {"scal_logA": 8.0, "scal_logB": round(math.log10(5.0), 3), "scal_alpha": 1.5,
                                      "scal_beta": 0.01, "scal_E": 5.0}
    assert sv.sliders_clip(wild)
    assert sv.sliders_clip(ScalingLaw(A=406.4, B=410.7, alpha=0.34, beta=0.28, E=5.01))  # E alone, 0.01 past the end
    assert not sv.sliders_clip(ScalingLaw(A=406.4, B=410.7, alpha=0.34004, beta=0.28, E=1.69))  # within the step


def test_the_shown_law_is_the_presets_own_or_the_sliders():
    assert sv.shown_law("Chinchilla (Hoffmann et al. 2022)", {}) is CHINCHILLA
    state = {"scal_logA": 2.0, "scal_logB": 3.0, "scal_alpha": 0.3, "scal_beta": 0.4, "scal_E": 1.5}
    assert sv.shown_law(sv.CUSTOM, state) == ScalingLaw(A=100.0, B=1000.0, alpha=0.3, beta=0.4, E=1.5)


# ---------------------------------------------------------------- optima, famous models, a budget

@pytest.mark.parametrize("law", [CHINCHILLA, EPOCH_2024])
def test_the_split_is_the_lowest_point_of_the_budget_line(law):
    C = FAMOUS_MODELS[2].compute  # Chinchilla's own, 5.88e23
    n, d, ratio = sv.split(law, C)
    bn, bd = brute_optimum(law, C)
    assert n == pytest.approx(bn, rel=1e-3) and d == pytest.approx(bd, rel=1e-3) and ratio == pytest.approx(d / n)
    assert 6 * n * d == pytest.approx(C)


def test_the_presets_disagree_on_tokens_per_parameter():
    C = 6 * 70e9 * 1.4e12
    ratios = sv.preset_ratios(C)
    for name, law in (("Chinchilla (Hoffmann et al. 2022)", CHINCHILLA),
                      ("Epoch replication (Besiroglu et al. 2024)", EPOCH_2024)):
        n, d = brute_optimum(law, C)
        assert ratios[name] == pytest.approx(d / n, rel=2e-3)
    assert round(ratios["Chinchilla (Hoffmann et al. 2022)"], 1) == 92.8  # the figure the page test reads
    assert round(ratios["Epoch replication (Besiroglu et al. 2024)"], 1) == 18.4


def test_size_note_against_the_models_own_parameter_count():
    cfg = ModelConfig(vocab_size=11, n_ctx=16, d_model=24, n_heads=3, n_layers=2)
    total = sum(p.numel() for p in Transformer(cfg).parameters())
    assert sv.size_note(cfg) == (f" (the largest in the table below, 540B parameters, has {540e9 / total:,.0f} "
                                 f"times the {total:,} of this app's shipped model)")
    assert sv.size_note(None) == ""


def test_famous_rows_as_the_table_shows_them():
    rows, worst = sv.famous_rows(CHINCHILLA)
    chin = next(r for r in rows if r["model"] == "Chinchilla")
    assert (chin["parameters"], chin["tokens"], chin["compute (FLOPs)"]) == ("70B", "1.4T", "5.88e23")
    assert chin["tokens / parameter"] == pytest.approx(20.0)
    assert set(sv.FAMOUS_FORMATS) <= set(chin)
    # the worst: the largest loss above the optimum for the same compute, found here by brute force
    excess = {}
    for m in FAMOUS_MODELS:
        bn, bd = brute_optimum(CHINCHILLA, m.compute)
        excess[m.name] = float(CHINCHILLA.loss(m.N, m.D) - CHINCHILLA.loss(bn, bd))
    assert worst["model"] == max(excess, key=excess.get) == "MT-NLG 530B"
    assert worst["excess_loss"] == pytest.approx(excess["MT-NLG 530B"], abs=1e-6)


def test_the_lectures_budget_by_hand():
    """The budget the page opens on (the form's defaults), worked out here: GPU-hours x 3600 s x peak x utilisation,
    and the optimum where the loss along 6ND = C stops falling (finite differences of the law written out)."""
    from core.analysis.scaling import BUDGET_DEFAULTS as d

    assert sv.PEAK_TFLOPS * 1e12 == d["peak_flops"]   # the TFLOP/s the page states are the ones it computes with
    b = sv.spend(CHINCHILLA, d["dollars"], d["dollars_per_gpu_hour"], sv.PEAK_TFLOPS, d["utilisation"])
    hours = d["dollars"] / d["dollars_per_gpu_hour"]
    assert b.gpu_hours == pytest.approx(hours) and b.C == pytest.approx(hours * 3600 * d["peak_flops"] * d["utilisation"])
    assert b.ND == pytest.approx(b.C / 6) and b.N * b.D == pytest.approx(b.ND)
    law = CHINCHILLA

    def along(log_n):  # the loss along the budget line, written out: A/N^alpha + B/D^beta + E with D = C / 6N
        N = math.exp(log_n)
        return law.A / N ** law.alpha + law.B / (b.C / (6 * N)) ** law.beta + law.E
    x, h = math.log(b.N), 1e-3
    slope, curve = (along(x + h) - along(x - h)) / (2 * h), (along(x + h) - 2 * along(x) + along(x - h)) / h ** 2
    assert abs(slope) < 1e-6 * curve and curve > 0       # a minimum: flat, and rising either way
    assert along(x - 0.1) > along(x) < along(x + 0.1)
    bn, _ = brute_optimum(CHINCHILLA, b.C)
    assert b.N == pytest.approx(bn, rel=1e-3) and b.tokens_per_param == pytest.approx(b.D / b.N)
    assert b.loss == pytest.approx(along(x), rel=1e-12)


def test_a_tenfold_budget_multiplies_the_optimum_by_the_tenfold_factors():
    fn, fd = sv.tenfold(CHINCHILLA)
    n1, d1, _ = sv.split(CHINCHILLA, 1e22)
    n2, d2, _ = sv.split(CHINCHILLA, 1e23)
    assert (fn, fd) == pytest.approx((n2 / n1, d2 / d1))
    assert (round(fn, 2), round(fd, 2)) == (2.83, 3.53) and fn * fd == pytest.approx(10)


# ---------------------------------------------------------------- fitting your runs

def test_the_example_runs_are_the_same_every_time_and_one_percent_off_the_law():
    truth, runs = sv.example_runs()
    again = sv.example_runs()[1]
    assert truth is EPOCH_2024 and len(runs) == 250 and np.array_equal(runs.loss, again.loss)
    off = np.log(runs.loss / EPOCH_2024.loss(runs.N, runs.D))
    assert 0.008 < off.std() < 0.012


def test_fit_csv_fits_the_parsed_runs_on_the_page_runs_threads(monkeypatch):
    # the fit itself is tested in test_scaling.py (4,500 starts take a while); here, what fit_csv hands it
    seen = {}
    monkeypatch.setattr(sv, "fit_scaling_law",
                        lambda N, D, loss, **kw: seen.update(N=N, D=D, loss=loss, **kw) or CHINCHILLA)
    assert sv.fit_csv("N,D,loss\n" + "".join(f"{n}M,{n * 20}B,{2 + 1 / n}\n" for n in range(1, 9))) is CHINCHILLA
    assert seen["N"].tolist() == [n * 1e6 for n in range(1, 9)]
    assert seen["D"].tolist() == [n * 20e9 for n in range(1, 9)]
    assert seen["loss"].tolist() == pytest.approx([2 + 1 / n for n in range(1, 9)]) and seen["threads"] is None


def test_fit_table_puts_the_true_constants_beside_the_fitted():
    fit = ScalingLaw(A=400.0, B=420.0, alpha=0.35, beta=0.27, E=1.7)
    table = sv.fit_table(fit, CHINCHILLA)
    assert [r["constant"] for r in table] == ["A", "B", "α", "β", "L∞ (E)"]
    assert table[2] == {"constant": "α", "fitted": 0.35, "true": 0.34}
    assert all("true" not in r for r in sv.fit_table(fit, None))


# ---------------------------------------------------------------- a study's law

def runs_of(law: ScalingLaw, n_sizes=3, n_budgets=3, **extra) -> list[dict]:
    """Rows as core.training.study writes them, their loss exactly the law's."""
    rows = []
    for i, N in enumerate(np.geomspace(1e4, 2e5, n_sizes)):
        for D in np.geomspace(3e5, 3e6, n_budgets):
            rows.append(dict(run_id=f"r{i}-{D:.0f}", N=int(N), D=int(D), loss=float(law.loss(int(N), int(D))),
                             d_model=16 * (i + 1), n_layers=2, n_heads=i + 1, steps=int(D) // 1024, **extra))
    return rows


class Fits:
    """A stand-in for the page's cached fit: records the CSV texts it was given, answers ``law`` (or raises)."""

    def __init__(self, law=CHINCHILLA, error: Exception | None = None):
        self.law, self.error, self.texts = law, error, []

    def __call__(self, csv_text: str) -> ScalingLaw:
        self.texts.append(csv_text)
        if self.error:
            raise self.error
        return self.law


def test_refit_fits_from_min_runs_on_and_passes_the_rows_as_csv():
    rows = runs_of(CHINCHILLA)  # 9 runs
    fits = Fits()
    assert ss.refit(rows[:MIN_RUNS - 1], fits) == (None, None) and fits.texts == []
    assert ss.refit(rows, fits) == (CHINCHILLA, None)
    back = parse_runs(fits.texts[0])
    assert back.N.tolist() == [r["N"] for r in rows] and back.D.tolist() == [r["D"] for r in rows]
    assert back.loss == pytest.approx([r["loss"] for r in rows], abs=1e-6)
    assert ss.refit(rows, Fits(error=FitError("no power law"))) == (None, "no power law")


def fit_json(law=EPOCH_2024) -> dict:
    constants = dict(A=law.A, B=law.B, alpha=law.alpha, beta=law.beta, E=law.E)
    ci = {k: [0.5 * v, 2 * v] for k, v in {**constants, "a": 0.5}.items()}
    return {"runs": 9, "law": constants,
            "bootstrap": {"resamples": 200, "failed": 3, "seed": 0, "level": 0.95, "intervals": ci}}


def test_the_shipped_study_shows_fit_json_and_fits_only_without_one():
    rows, bad = runs_of(CHINCHILLA), [({"run_id": "x", "N": 5, "D": 7}, "its loss is NaN (the run diverged)")]
    fits = Fits()
    got = ss.shipped_fit(rows, bad, fit_json(), [], fits)
    assert got.law == EPOCH_2024 and got.intervals["alpha"] == [0.5 * 0.3478, 2 * 0.3478] and fits.texts == []
    assert got.warnings == ["1 run is left out of the fit: run x (N = 5, D = 7): its loss is NaN (the run diverged)."]
    got = ss.shipped_fit(rows, [], None, ["fit.json cannot be read", "a second problem"], fits)
    assert got.law == CHINCHILLA and got.intervals is None and len(fits.texts) == 1
    assert got.warnings == ["fit.json cannot be read; the fit shown is made here from its runs, without intervals"]
    got = ss.shipped_fit(rows, [], None, ["p"], Fits(error=FitError("no power law")))
    assert got.law is None and got.warnings == ["p", "no power law"]
    got = ss.shipped_fit([], [], None, ["study.json cannot be read"], fits)
    assert got.law is None and got.warnings == ["study.json cannot be read"] and len(fits.texts) == 1


def status(state="running", done=9, total=24, eta_s=None):
    return SimpleNamespace(state=state, done=done, total=total, eta_s=eta_s)


def test_a_live_study_is_fitted_from_min_runs_on(tmp_path):
    rows = runs_of(CHINCHILLA)
    got = ss.live_fit(status(), rows, tmp_path, Fits())
    assert got.law == CHINCHILLA and not got.waiting and not got.warnings and got.unfitted == UNFITTED
    assert str(MIN_RUNS) in UNFITTED
    got = ss.live_fit(status(done=3), rows[:3], tmp_path, Fits())
    assert got.law is None and got.waiting == f"3 runs so far; the fit starts at {MIN_RUNS}."
    small = ss.live_fit(status("finished", done=6, total=6), rows[:6], tmp_path, Fits())
    assert small.law is None and not small.waiting
    assert small.unfitted == f"its 6 runs (too few to fit five constants: the fit needs {MIN_RUNS})"
    failed = ss.live_fit(status(), rows, tmp_path, Fits(error=FitError("no power law")))
    assert failed.law is None and failed.fit_error == "no power law" and not failed.waiting


def test_a_finished_study_shows_its_fit_json_or_says_why_not(tmp_path):
    import json

    rows = runs_of(CHINCHILLA)
    (tmp_path / "fit.json").write_text(json.dumps(fit_json()))
    got = ss.live_fit(status("finished", done=9, total=9), rows, tmp_path, Fits())
    assert got.law == EPOCH_2024 and got.boot["failed"] == 3 and not got.warnings
    running = ss.live_fit(status("running"), rows, tmp_path, Fits())  # fit.json is read only once it has finished
    assert running.law == CHINCHILLA and running.intervals is None
    (tmp_path / "fit.json").write_text("{not json")
    got = ss.live_fit(status("finished", done=9, total=9), rows, tmp_path, Fits())
    assert got.law == CHINCHILLA and got.intervals is None
    assert len(got.warnings) == 1 and "cannot be read" in got.warnings[0] and "without intervals" in got.warnings[0]


def test_the_comparison_table_writes_intervals_low_to_high():
    ci = {k: [0.0532, 0.325] for k in ("A", "B", "alpha", "beta", "a")} | {"E": [1e-9, 1.43]}
    rows = {r["constant"]: r for r in ss.comparison_table(EPOCH_2024, ci)}
    assert rows["α (capacity exponent)"]["95% interval"] == "0.0532 to 0.325"
    assert rows["E (the floor)"]["95% interval"] == "0 to 1.43"
    assert rows["α (capacity exponent)"]["Chinchilla 2022"] == 0.34 and rows["E (the floor)"]["this study"] == 1.8172
    assert {r["95% interval"] for r in ss.comparison_table(EPOCH_2024, None)} == {"–"}


def test_fit_quality_by_hand():
    rows = runs_of(CHINCHILLA)
    assert ss.fit_quality(rows, CHINCHILLA) == pytest.approx((1.0, 0.0))
    for i, r in enumerate(rows):  # every run 1 % off the law, alternately above and below: RMS of log loss 1 %
        r["loss"] *= math.exp(0.01 if i % 2 else -0.01)
    logL = np.log([r["loss"] for r in rows])
    r2 = 1 - len(rows) * 0.01 ** 2 / ((logL - logL.mean()) ** 2).sum()
    assert ss.fit_quality(rows, CHINCHILLA) == pytest.approx((r2, 1.0))


# ---------------------------------------------------------------- what the page says about a study

def test_the_intervals_note_counts_the_refits():
    note = ss.intervals_note({"resamples": 200, "failed": 3}, {})
    assert "percentile of 197 refits" in note and "3 of 200 resamples pinned down no law" in note
    assert ss.intervals_note(None, None).endswith("The intervals come when the study has finished: it then refits "
                                                  "resampled runs.")
    assert ss.intervals_note(None, {}).endswith("which carry the units of N and D. ")


def test_the_scale_note_by_hand():
    rows = [dict(N=1e4, D=1e6, loss=2.0), dict(N=2e4, D=1e6, loss=1.9), dict(N=4e4, D=1e6, loss=1.8)]
    C = 6 * 2e4 * 1e6  # the median of 6e10, 1.2e11, 2.4e11
    n, d = brute_optimum(CHINCHILLA, C)
    ours = f"{d / n:.0f}" if d / n >= 10 else f"{d / n:.1f}"
    note = ss.scale_note(CHINCHILLA, rows)
    assert note.startswith(f"At C = 1.2e11 FLOPs (the median run's compute) the compute-optimal number of tokens per "
                           f"parameter is {ours} by this fit, {ours} by Chinchilla's constants, ")
    # 6 x 70M x 5B = 2.1e18, log10(2.1e18 / 1.2e11) = 7.24
    assert "smallest runs used about 2.1e18 FLOPs" in note and "extrapolated 7 decades down" in note


def test_the_shipped_summary_names_what_was_trained():
    meta = {"grid": {"widths": [16, 32], "n_layers": 2}, "corpus": "tinyshakespeare.txt"}
    rows = [dict(D=300_032), dict(D=3_000_320), dict(D=300_032)]
    assert ss.shipped_summary(meta, rows).startswith(
        "The study below did that on this project's machine: 3 character-level models, widths d = 16, 32 at depth 2, "
        "each trained on 300k, 3M characters of tinyshakespeare.txt, with the training loop")
    assert ss.shipped_summary(None, rows) == "" and ss.shipped_summary({}, rows) == ""


def test_the_wall_note_adds_the_sessions_and_names_a_busy_machine():
    meta = {"sessions": [dict(wall_s=600, load_start=1.0, load_end=5.0),
                         dict(wall_s=540, machine="Intel Xeon, 2 cores", load_start=2.5)]}
    assert ss.wall_note(meta, 2) == ("The shipped study took about 19 minutes of wall time on Intel Xeon, shared with "
                                     "other work (load average 1.0 to 5.0 on 2 cores)")
    assert ss.wall_note(meta, 4) == "The shipped study took about 19 minutes of wall time on Intel Xeon"  # 5 < 1.5 x 4
    assert ss.wall_note({}, 2) == "The shipped study took about 10 seconds of wall time"


def test_exponent_notes_by_hand():
    rows = [dict(N=1000, D=900, d_model=8, n_layers=2, n_heads=1, steps=1234),
            dict(N=4000, D=1800, d_model=16, n_layers=2, n_heads=2, steps=2500)]
    notes = ss.exponent_notes({"corpus_chars": 1000}, rows)
    assert "1k characters, and the largest budget here reads its training part 2.0 times over" in notes["here"]
    assert notes["lever"] == "Here N spans 4× (1k to 4k parameters) and D 2×; "
    assert notes["shape"] == (" The smallest model (d = 8, 2 blocks, 1 head) is limited by its shape as much as by "
                              "its count.")
    assert "a run takes only 1,234 optimisation steps" in notes["short"]
    assert "2 heads" in ss.exponent_notes({"corpus_chars": 1000}, rows[1:])["shape"]
    assert ss.exponent_notes({}, []) == dict(here="", lever="", shape="", short="")


def test_the_grid_note_counts_its_runs():
    grid = SimpleNamespace(widths=(16, 32, 64), n_layers=2, tokens=(100_000, 300_000), tokens_per_step=1024,
                           steps=lambda t: t // 1024)
    note = ss.grid_note(grid, 44.0, 2)
    # 97 x 1024 = 99,328 and 292 x 1024 = 299,008 characters; 3 x 2 = 6 runs
    assert note == ("Widths d = 16, 32, 64 at depth 2; budgets D = 99.3k, 299k characters. It takes about 40 seconds "
                    "on 2 idle cores (from the shipped study's runs), longer while others train. 6 runs are too few to "
                    f"fit five constants: this grid only shows the trend (the fit needs {MIN_RUNS}).")
    big = SimpleNamespace(**{**vars(grid), "widths": (16, 32, 64, 128)})
    assert ss.grid_note(big, None, 2).endswith("characters.")  # 8 runs, no estimate


# ---------------------------------------------------------------- your study: start it, say where it is

class FakeJob:
    made, folder, refuse = [], None, None

    def __init__(self, path, grid, folder=None, temporary=False, corpus_name=""):
        self.path, self.grid, self.folder, self.temporary, self.corpus_name = path, grid, folder, temporary, corpus_name
        self.stopped = None
        FakeJob.made.append(self)

    @staticmethod
    def new_folder():
        return FakeJob.folder

    def start(self):
        if FakeJob.refuse:
            raise FakeJob.refuse

    def stop(self, wait=10.0):
        self.stopped = wait


def test_starting_a_study_writes_its_corpus_and_then_stops_the_old_one(tmp_path, monkeypatch):
    monkeypatch.setattr(ss, "StudyJob", FakeJob)
    FakeJob.folder, FakeJob.refuse, FakeJob.made = tmp_path, None, []
    old = FakeJob("old.txt", "tiny")
    old.stopped = "running"
    new = ss.start_study("small", "pydoc", "some text", old=old)
    assert new.path == tmp_path / "corpus.txt" and (tmp_path / "corpus.txt").read_text() == "some text"
    assert (new.grid, new.folder, new.temporary, new.corpus_name) == ("small", tmp_path, True, "pydoc")
    assert old.stopped is None  # stopped, and with wait=None: the page does not wait for the old study's end
    given = tmp_path / "given.txt"
    (tmp_path / "corpus.txt").unlink()
    assert ss.start_study("tiny", "Tiny Shakespeare", "unused", path=given).path == given
    assert not (tmp_path / "corpus.txt").exists()


def test_a_refused_study_leaves_the_old_one_running(tmp_path, monkeypatch):
    monkeypatch.setattr(ss, "StudyJob", FakeJob)
    FakeJob.folder, FakeJob.refuse, FakeJob.made = tmp_path, JobBusy("the server runs 1 study"), []
    old = FakeJob("old.txt", "tiny")
    old.stopped = "running"
    with pytest.raises(JobBusy):
        ss.start_study("small", "pydoc", "text", old=old)
    assert old.stopped == "running"


def test_every_state_has_a_label_and_the_bar_says_how_far():
    assert set(ss.STATE_LABELS) == set(STATES) | set(ACTIVE)
    assert ss.progress(status("running", 3, 24, eta_s=125), "full", "x.txt") == (
        0.125, "Training: 3 of 24 runs done, about 2 minutes left (full grid on x.txt)")
    assert ss.progress(status("new", 0, 0), "tiny", "y") == (0.0, "Not started: 0 of 0 runs done (tiny grid on y)")


def test_the_study_stamp_changes_when_a_file_is_rewritten(tmp_path):
    (tmp_path / "runs.csv").write_text("a")
    before = ss.study_stamp(tmp_path)
    (tmp_path / "runs.csv").write_text("ab")
    assert ss.study_stamp(tmp_path) != before
    assert ss.study_stamp(tmp_path / "gone") == ()
