"""Mutation score of the analysis modules: mutmut 3 (requirements-dev.txt, configured in setup.cfg) run
module by module, then killed/total per module.

    python -m bench.mutation                      # every module setup.cfg lists, one after another
    python -m bench.mutation params scaling       # only these (by file name)
    python -m bench.mutation --report             # the table from the last runs, running nothing
    python -m bench.mutation --survivors params   # and the names of the mutants that survived
    mutmut show core.nn.params.x_count_parameters__mutmut_3   # what one mutant changed

mutmut works in mutants/ (git-ignored): a copy of core/ whose functions switch between their mutants, and of
tests/. It first runs the selected tests once to learn which tests call which function, then, for each mutant,
only the tests that reach it. Results are kept in mutants/*.meta: a second run re-tests only the functions
(or tests) that changed; delete mutants/ to start over. A development tool, not part of CI.
"""
from __future__ import annotations

import configparser
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TARGET = 0.85  # the bar: at least 85 % of each module's mutants killed
# mutmut's exit codes (mutmut.stats.status_by_exit_code), restated so --report needs no mutmut import:
# 1 and 3 are failed tests (killed); 0 the tests passed (survived); 33 and 5 no test reaches the function
KILLED, SURVIVED, NO_TESTS = {1, 3}, {0}, {5, 33}
# SIGXCPU or mutmut's own limit: the tests ran far longer than unmutated (a hang); mutmut's convention and ours:
# detected, so counted with the killed, and shown in a column of their own
TIMEOUT = {24, -24, 152, 255, 36}


def modules() -> dict[str, str]:
    """File name -> path of every module setup.cfg's [mutmut] only_mutate lists (the one list of what is mutated:
    a module that moves changes there only)."""
    cfg = configparser.ConfigParser()
    cfg.read(ROOT / "setup.cfg")
    paths = [p.strip() for p in cfg.get("mutmut", "only_mutate").splitlines() if p.strip()]
    return {Path(p).stem: p for p in paths}


def run_module(name: str, path: str, children: int) -> int:
    """``mutmut run`` on one module's mutants; its progress goes to mutants/<name>.log, not the terminal."""
    env = dict(os.environ)
    # one thread per test process: mutmut runs ``children`` of them, on a box whose cores others share
    env.update(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    (ROOT / "mutants").mkdir(exist_ok=True)
    mutmut = Path(sys.executable).with_name("mutmut")  # the console script: `python -m mutmut` re-imports itself
    with open(ROOT / "mutants" / f"{name}.log", "w") as log:
        dotted = path.removesuffix(".py").replace("/", ".")  # core/analysis/x.py -> mutants core.analysis.x.*
        return subprocess.run([str(mutmut), "run", "--max-children", str(children), f"{dotted}.*"],
                              cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT).returncode


def tally(path: str) -> dict | None:
    """Counts by outcome for one module, from mutmut's results file; None before its first run."""
    meta = ROOT / "mutants" / f"{path}.meta"
    if not meta.is_file():
        return None
    codes = json.loads(meta.read_text())["exit_code_by_key"]
    counts = dict(total=len(codes), killed=0, timeout=0, survived=[], no_tests=0, not_checked=0, other=0)
    for key, code in codes.items():
        if code in KILLED or code in TIMEOUT:
            counts["killed"] += 1
            counts["timeout"] += code in TIMEOUT
        elif code in SURVIVED:
            counts["survived"].append(key)
        elif code in NO_TESTS:
            counts["no_tests"] += 1  # not killed either: no selected test calls this function
        elif code is None:
            counts["not_checked"] += 1
        else:
            counts["other"] += 1  # suspicious, segfault, interrupted
    return counts


def report(names, paths: dict[str, str], survivors: bool = False) -> bool:
    """Print killed/total per module; True when every module reaches TARGET."""
    ok = True
    print(f"{'module':<16}{'killed/total':>14}{'score':>8}{'timeout':>9}{'survived':>10}{'no tests':>10}"
          f"{'unchecked':>11}")
    for name in names:
        c = tally(paths[name])
        if c is None:
            print(f"{name:<16}{'not run':>14}")
            ok = False
            continue
        score = c["killed"] / max(c["total"], 1)
        ok &= score >= TARGET
        print(f"{name:<16}{c['killed']:>8}/{c['total']:<5}{score:>8.1%}{c['timeout']:>9}{len(c['survived']):>10}"
              f"{c['no_tests']:>10}{c['not_checked']:>11}")
        if survivors:
            for key in c["survived"]:
                print(f"    survived: {key}")
    return ok


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    only_report, survivors = "--report" in args, "--survivors" in args
    paths = modules()
    names = [a for a in args if not a.startswith("--")] or list(paths)
    unknown = set(names) - set(paths)
    if unknown:
        print(f"not a mutated module: {', '.join(sorted(unknown))} (one of {', '.join(paths)})")
        return 2
    if not only_report:
        for name in names:
            print(f"mutating {paths[name]} ...", flush=True)
            if run_module(name, paths[name], children=2) != 0:  # 2 children: the dev box has 2 cores
                print(f"  mutmut failed: see mutants/{name}.log")
    return 0 if report(names, paths, survivors) else 1


if __name__ == "__main__":
    sys.exit(main())
