"""How far the time estimates land from the real times: the Training page's presets and a scaling study's grid.

    python -m bench.estimates                      # the presets as shipped (2,000 and 1,500 steps), the small grid
    python -m bench.estimates --steps 400 --grid small   # a small scale: every preset cut to 400 steps

For each case the estimate is made as the page makes it before Start (core.training.speed.estimate_run: a few
steps of the run's own shape timed here, plus its evaluations, samples, probes, start and end on the run's
schedule; for a study core.training.speed.study_estimate: each width timed, the workers' start, the fit and its
bootstrap refits), beside the estimate the page showed before this bench existed (6ND over one measured FLOP rate;
for a study the shipped study's CPU seconds per unit of cost, without the fit). Then the run is started as the page
starts it (core.training.training_job.TrainingJob, core.training.study_job.StudyJob) and timed from Start to
finished. The runs go one after another in this process. For a training run the time left the live view shows at
a tenth of the steps (recalculated from the run's own pace) is compared with what really remained. Target: every
estimate within ±30 %.
Results go to bench/results/estimates.md (and the rows to stdout).
"""
from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

RESULTS = Path(__file__).parent / "results" / "estimates.md"
TARGET = 0.30  # |estimate / real - 1| at most this


def _corpora() -> dict[str, str]:
    from core.data.corpus import pydoc_text, read_text_file, shakespeare_path

    path = shakespeare_path()
    out = {"shakespeare": read_text_file(path)} if path is not None else {}
    out["pydoc"] = pydoc_text()
    return out


def presets(steps: int | None) -> list[tuple[str, str, dict]]:
    """(name, corpus, JobSettings fields): the page's defaults on both corpora and the induction preset."""
    from core.training.job_settings import INDUCTION_PRESET

    cut = {} if steps is None else {"steps": steps}
    return [("default settings", "shakespeare", dict(cut)),
            ("default settings", "pydoc", dict(cut)),
            ("induction preset", "shakespeare", {**INDUCTION_PRESET, **cut})]


def time_run(name: str, corpus_name: str, text: str, fields: dict) -> dict:
    from core.training import speed
    from core.training.job_settings import JobSettings, job_cost
    from core.training.training_job import TrainingJob

    s = JobSettings(**fields)
    vocab = len(set(text))
    rate, _ = speed.measured_flop_rate()  # the page's figure before: 6ND over this rate
    old = job_cost(s, vocab, len(text)).seconds(rate)
    estimate, pace = speed.estimate_run(s, vocab, len(text))
    low_high = speed.estimate_range(estimate.seconds)  # at the load now, as the page says it before Start
    job = TrainingJob(text, corpus_name, s, pace=pace)
    t0 = time.perf_counter()
    job.start()
    tenth, left_at_tenth, at_tenth = max(1, s.steps // 10), None, None
    while True:
        st = job.status()
        if left_at_tenth is None and st.step >= tenth and st.eta_s is not None:
            left_at_tenth, at_tenth = st.eta_s, time.perf_counter() - t0
        if st.state in ("finished", "failed", "stopped"):
            break
        time.sleep(0.1)
    real = time.perf_counter() - t0
    if st.state != "finished":
        raise RuntimeError(f"{name} on {corpus_name}: {st.state} ({st.message})")
    row = {"case": f"{name}, {s.steps:,} steps", "corpus": corpus_name, "old_estimate_s": round(old, 1),
           "estimate_s": round(estimate.seconds, 1), "real_s": round(real, 1),
           "ratio": round(estimate.seconds / real, 3), "old_ratio": round(old / real, 3),
           "load": round(os.getloadavg()[0], 2)}
    if left_at_tenth is not None:
        row["left_at_10pct_s"] = round(left_at_tenth, 1)
        row["really_left_s"] = round(real - at_tenth, 1)
        row["left_ratio"] = round(left_at_tenth / (real - at_tenth), 3)
    low, high = low_high  # the range the page says before Start
    row["range_s"] = (round(low, 1), round(high, 1))
    row["in_range"] = low <= real <= high
    row["parts"] = {k: round(v, 1) for k, v in estimate.parts.items()}
    return row


def time_study(grid_name: str, corpus_name: str, text: str) -> dict:
    from core.training import speed
    from core.training.study_grid import GRIDS, estimate_seconds
    from core.training.study_files import SHIPPED_STUDY, read_rows
    from core.training.study_files import RUNS_CSV
    from core.training.study_job import BOOTSTRAP, StudyJob

    grid = GRIDS[grid_name]
    old = estimate_seconds(grid, read_rows(Path(SHIPPED_STUDY) / RUNS_CSV))
    est = speed.study_estimate(grid, len(text), len(set(text)), None, BOOTSTRAP)
    folder = StudyJob.new_folder()
    path = folder / "corpus.txt"
    path.write_text(text, encoding="utf-8")
    job = StudyJob(path, grid_name, folder=folder, temporary=True, corpus_name=corpus_name)
    t0 = time.perf_counter()
    job.start()
    phases: dict[str, float] = {}  # the state the page shows -> when it was first seen
    while True:
        st = job.status()
        phases.setdefault(st.state, round(time.perf_counter() - t0, 1))
        if not st.active:
            break
        time.sleep(0.2)
    real = time.perf_counter() - t0
    if st.state != "finished":
        raise RuntimeError(f"study {grid_name}: {st.state} ({st.message})")
    fit_real = real - phases.get("fitting", real)
    return {"case": f"study, {grid_name} grid ({st.total} runs, {BOOTSTRAP} refits)", "corpus": corpus_name,
            "old_estimate_s": round(old, 1), "estimate_s": round(est.seconds, 1), "real_s": round(real, 1),
            "ratio": round(est.seconds / real, 3), "old_ratio": round(old / real, 3),
            "load": round(os.getloadavg()[0], 2),
            "parts": {"start": round(est.start, 1), "runs": round(est.runs, 1), "fit": round(est.fit, 1),
                      "fit_real": round(fit_real, 1)},
            "phases_seen_at_s": phases}


def report(rows: list[dict], args) -> str:
    def within(r):
        return "✓" if abs(r["ratio"] - 1) <= TARGET else "✗"

    lines = ["# Time estimates against the real times", "",
             f"`python -m bench.estimates{' --steps ' + str(args.steps) if args.steps else ''} --grid {args.grid}` "
             f"on {os.cpu_count()} cores, {time.strftime('%Y-%m-%d')}. Estimate: what the page says before Start "
             "(core.training.speed); old: what it said before (6ND over one FLOP rate; for a study, the shipped "
             "study's CPU seconds, no fit). Real: Start to finished. Target: within ±30 %.", "",
             "| case | corpus | old estimate (s) | estimate (s) | real (s) | estimate / real | old / real "
             "| within ±30 % |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['case']} | {r['corpus']} | {r['old_estimate_s']} | {r['estimate_s']} | {r['real_s']} | "
                     f"{r['ratio']:.2f} | {r['old_ratio']:.2f} | {within(r)} |")
    lines += ["", "Parts of each estimate (s), the machine's 1-minute load average at the end, and for a run the time "
              "left shown at a tenth of its steps against what really remained:", ""]
    for r in rows:
        extra = (f"; time left at 10 %: {r['left_at_10pct_s']} s shown, {r['really_left_s']} s really "
                 f"({r['left_ratio']:.2f})" if "left_ratio" in r else "")
        if "range_s" in r:
            extra += f"; range said {r['range_s'][0]}-{r['range_s'][1]} s ({'real inside' if r['in_range'] else 'real outside'})"
        phases = f"; phases first seen at (s): {r['phases_seen_at_s']}" if "phases_seen_at_s" in r else ""
        lines.append(f"- {r['case']}, {r['corpus']}: {r['parts']}, load {r['load']}{extra}{phases}")
    return "\n".join(lines) + "\n"


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m bench.estimates", description=__doc__.split("\n")[0])
    p.add_argument("--steps", type=int, default=None, help="cut every preset to this many steps (a small scale)")
    p.add_argument("--grid", default="small", help="the scaling study's grid (default small; 'none' skips it)")
    p.add_argument("--no-write", action="store_true", help="print only; leave bench/results/estimates.md")
    args = p.parse_args(argv)
    corpora = _corpora()
    rows = []
    for name, corpus_name, fields in presets(args.steps):
        if corpus_name in corpora:
            rows.append(time_run(name, corpus_name, corpora[corpus_name], fields))
            print(rows[-1], flush=True)
    if args.grid != "none":
        corpus_name = "shakespeare" if "shakespeare" in corpora else "pydoc"
        rows.append(time_study(args.grid, corpus_name, corpora[corpus_name]))
        print(rows[-1], flush=True)
    text = report(rows, args)
    print(text)
    if not args.no_write:
        RESULTS.write_text(text, encoding="utf-8")
    return rows


if __name__ == "__main__":
    main()
