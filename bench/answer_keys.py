"""Grading the explorer's methods on the answer keys (issue 59 §2): every method of core.analysis.grading on every key
of assets/answer_keys/, with its two null controls (a random-weight twin, the task's answers shuffled).

    python -m bench.answer_keys [--only KEY ...] [--methods M ...] [--examples 64] [--out bench/results/answer-keys.csv]

Columns: key, method, auroc, precision, recall, random_twin, nonsense_task (the contract's, in this order; the two
controls are the method's largest score on the random twin and on the nonsense labels, in the finding's unit), then
the finding (the method's largest score on the trained model and the real task), its unit (share or nats) and the
margin it must clear over both controls, what the AUROC is over (components or edges), the key's members and
non-members among them, the page's threshold, whether the finding stands, the method's seconds (the nonsense labels
read off its own runs) and the controls' seconds (the random twin), with the app's torch thread setting
(TE_TORCH_THREADS, default 1), and the verdict in words. A method the keys cannot grade
(core.analysis.grading.SKIPPED) gets a row with no numbers and the reason. Targets: one method on one key within
30 s; the controls within twice the method's time.
"""
from __future__ import annotations

import argparse
import math
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench import write_csv  # noqa: E402
from core.analysis import grading as G  # noqa: E402
from core.analysis.answer_keys import list_keys, load_key  # noqa: E402
from core.analysis.null_controls import random_twin  # noqa: E402
from core.serve.threads import page_threads, use_threads  # noqa: E402

OUT = ROOT / "bench" / "results" / "answer-keys.csv"
METHOD_S = 30.0     # one method on one key, at most
CONTROL_RATIO = 2.0  # both controls together, at most this many times the method's own time


def _num(x: float, digits: int = 3):
    return "" if x is None or (isinstance(x, float) and math.isnan(x)) else round(float(x), digits)


def row(g: G.Grade) -> dict:
    return {"key": g.key, "method": g.method, "auroc": _num(g.auroc), "precision": _num(g.precision),
            "recall": _num(g.recall), "random_twin": _num(g.random_twin), "nonsense_task": _num(g.nonsense_task),
            "finding": _num(g.finding), "unit": g.unit, "margin": _num(g.margin), "over": g.level, "members": g.positives, "others": g.negatives, "threshold": _num(g.threshold, 4),
            "stands": g.stands if not math.isnan(g.auroc) else "", "seconds": round(g.seconds, 2),
            "control_seconds": round(g.control_seconds, 2), "note": g.verdict}


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--only", nargs="*", default=None, help="keys to grade (default all)")
    ap.add_argument("--methods", nargs="*", default=list(G.METHODS))
    ap.add_argument("--examples", type=int, default=G.EXAMPLES)
    ap.add_argument("--out", default=str(OUT))
    args = ap.parse_args(argv)
    threads = use_threads(page_threads())
    rows = []
    for name in args.only or list_keys():
        loaded = load_key(name)
        for method in args.methods:
            g = G.grade(name, method, args.examples, loaded=loaded)
            rows.append(row(g))
            print(f"{name:10s} {method:14s} auroc {g.auroc:.2f} ({g.level}, {g.positives}+/{g.negatives}-) "
                  f"P {g.precision:.2f} R {g.recall:.2f} | finding {g.finding:.3f} twin {g.random_twin:.3f} nonsense "
                  f"{g.nonsense_task:.3f} {g.unit} {'stands' if g.stands else 'does not stand'} "
                  f"| {g.seconds:.1f} s, controls {g.control_seconds:.1f} s", flush=True)
        for method, why in G.SKIPPED.items():
            rows.append({**{k: "" for k in rows[-1]}, "key": name, "method": method, "note": f"not graded: {why}"})
    write_csv(rows, args.out)
    graded = [r for r in rows if r["seconds"] != ""]
    slowest = max(graded, key=lambda r: r["seconds"])
    worst = max(graded, key=lambda r: r["control_seconds"] / max(r["seconds"], 1e-9))
    print(f"\n{threads} torch thread(s), load {os.getloadavg()[0]:.1f}. Slowest method: {slowest['method']} on "
          f"{slowest['key']}, {slowest['seconds']} s (target {METHOD_S:.0f} s). Largest control ratio: "
          f"{worst['control_seconds'] / max(worst['seconds'], 1e-9):.2f}x ({worst['method']} on {worst['key']}; "
          f"target {CONTROL_RATIO:.0f}x); over every row, controls / method = "
          f"{sum(r['control_seconds'] for r in graded) / max(sum(r['seconds'] for r in graded), 1e-9):.2f}x.")
    n_keys = len(args.only or list_keys())
    for method in args.methods:  # which keys each method recovers: AUROC >= 0.9, and that and above both controls
        high = [r for r in graded if r["method"] == method and r["auroc"] != "" and r["auroc"] >= 0.9]
        ok = [r["key"] for r in high if r["stands"] is True]
        print(f"{method:14s} AUROC >= 0.9 on {len(high)} of {n_keys} ({', '.join(r['key'] for r in high)}); "
              f"standing above both controls too on {len(ok)} ({', '.join(ok)})")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()


# ------------------------------------------------------------------------------------ bench.run's answer_keys rows
GRADED = ("ioi", "path_patching")  # the slowest grade with a twin to run (about 1.5 s; its twin 1.6 s); the
#                                    attribution graph's on ioi (about 4.7 s) has no twin: its model has no transcoders
SCORE_MS = 300.0                   # the hunt's *Score my pick*: the page's rerun, at most


def _hunt_page(at_hunt):
    """A function rerunning the Cause and effect page's hunt after a press of *Score my pick* (an AppTest session
    opened on the hunt, the induction key, one right head and one wrong picked): the server time of the rerun."""
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=300)
    at.session_state["cause_mode"], at.session_state["hunt_key"] = "hunt", "induction"
    at.run()
    at.switch_page("pages/cause_effect.py")
    at.run()
    at.multiselect(key="hunt_pick_induction").set_value(at_hunt)
    at.run()
    if at.exception:
        raise RuntimeError(f"the hunt: {at.exception[0].message}")

    def again():
        at.button(key="hunt_score").click()
        at.run()
    return again


def bench_row(quick: bool):
    """Issue 59's measured rows, for ``python -m bench.run --only answer_keys``: one method graded on one key (the
    slowest of the table; target 30 s) against the key's whole task through the model once; its two null controls
    against the method's own time (target 2x); the hunt's *Score my pick* as the page's rerun (AppTest server time,
    target 300 ms) and as core work (the score and the key's figure), each against the home page's rerun."""
    from bench import run as R  # looked up at call time: the smoke test cuts bench.run's timing helpers
    from core.analysis.answer_keys import accuracy, all_components
    from core.analysis.hunt import score_pick
    from core.figures.answer_key_figures import key_figure

    print("\nAnswer keys (issue 59): one method graded on one key, its null controls, the hunt's scoring")
    name, method = GRADED
    loaded = load_key(name)
    model, _, key, task = loaded
    count = G.EXAMPLES // 4 if quick else G.EXAMPLES
    examples = G.pairs(task, model.config.n_ctx, count)
    labels = G.nonsense_labels(examples, model.config.vocab_size)
    score = G.SCORERS[method]
    ref = score(model, examples)
    # interleaved: the method alone; the method reading the nonsense labels off its own runs; the random twin
    t = R.interleaved({"alone": lambda: score(model, examples),
                       "shared": lambda: score(model, examples, labels),
                       "twin": lambda: score(random_twin(model), examples, norm=ref.norm),
                       "peer": lambda: accuracy(model, task)}, rounds=1 if quick else 3, reps=1)
    control_s = t["twin"] + max(0.0, t["shared"] - t["alone"])
    R.record(f"Answer keys: {method} graded on {name} ({count} examples)", t["alone"], t["peer"], "s",
             higher_is_better=False, note=f"peer: the key's {len(task.prompts)} prompts through the model once; "
                                          f"target {METHOD_S:.0f} s: {'met' if t['alone'] <= METHOD_S else 'missed'}")
    R.record("Answer keys: both null controls against the method's own time", control_s, t["alone"], "s",
             note=f"the ratio is controls / method (the twin's run {t['twin']:.2f} s, the nonsense labels read off "
                  f"the method's runs {t['shared'] - t['alone']:+.2f} s); target ≤ {CONTROL_RATIO:.0f}x: "
                  f"{'met' if control_s <= CONTROL_RATIO * t['alone'] else 'missed'}")
    ind = load_key("induction")
    c = ind[0].config
    pick = ["L2 H1", "L1 H1"]

    def core():
        score_pick(ind[2], pick, c)
        key_figure(tuple(all_components(c)), ind[2].components, ind[2].edges, c.n_layers, c.n_heads,
                   "key").to_plotly_json()
    t = R.interleaved({"page": _hunt_page(pick), "core": core, "home": R.page_rerun("pages/home.py")},
                      rounds=3, reps=3 if quick else 7)
    R.record("Hunt: Score my pick, the page's rerun", t["page"] * 1e3, t["home"] * 1e3, "ms", higher_is_better=False,
             note=f"peer: the home page's rerun; target {SCORE_MS:.0f} ms: "
                  f"{'met' if t['page'] * 1e3 <= SCORE_MS else 'missed'}")
    R.record("Hunt: the score and the key's figure (core)", t["core"] * 1e3, t["home"] * 1e3, "ms",
             higher_is_better=False, note="peer: the home page's rerun")
