"""A study of named runs, one row each in one table: every run trained alike (the same steps, seed and corpus) and
compared. The variants (core.training.variants) and the BPE-induction factors (core.training.bpe_induction) are
definitions on it: a table of runs (their ``BY_ID``), a task that trains one ``TableSpec`` into its row, and the
files the rows go to. What they share is here: the spec, the command line's checks, the merge into a study
already in --out, and the session that trains the specs on an engine (local or Ray, core.training.study_engines)
and rewrites the table after every run (core.training.study_run.each_row, the scaling study's loop too).

A study already in --out is merged into: the runs named now replace their rows, the others stay, provided its
runs have the same steps (one table compares runs trained alike); anything else is refused before any run unless
--overwrite starts the study afresh.
"""
from __future__ import annotations

import csv
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from core.data import corpus as corpora  # as a module: tests point shakespeare_path elsewhere
from core.data.corpus import read_text_file
from core.training import study_engines  # as a module: tests put an engine of their own in its place
from core.training.cli_args import chosen_runs, out_problem
from core.training.study_grid import StudyError
from core.training.study_run import each_row
from core.training.train_data import min_corpus_chars

MAX_TABLE_BYTES = 2 * 2**20  # the shipped tables are a few KB; a reader takes no more (core.views.variants_view)


@dataclass(frozen=True)
class TableSpec:
    """One run of a table study, the corpus included (so that a worker anywhere can train it)."""
    run: str                # its id in the study's table
    steps: int
    seed: int = 1337
    keep_weights: str = ""  # a folder to save the trained model in ("" for none)
    corpus: str = "tinyshakespeare.txt"  # the corpus file's name, for a kept model's card
    # the text is no part of a run's identity, and a megabyte has no place in a repr or a log
    text: str = field(default="", repr=False, compare=False)


def read_table(path: Path, fields: tuple[str, ...], what: str) -> list[dict]:
    """The rows of one of a study's CSV files; ValueError, in words, for a file that is not one."""
    try:
        if path.stat().st_size > MAX_TABLE_BYTES:
            raise ValueError(f"{path.name} is larger than {MAX_TABLE_BYTES // 2**20} MiB")
        with open(path, newline="", encoding="utf-8") as f:
            reader = csv.DictReader(f)
            rows = list(reader)
    except (OSError, UnicodeDecodeError, csv.Error) as e:
        raise ValueError(f"{path.name} cannot be read ({type(e).__name__})") from None
    if not set(fields) <= set(reader.fieldnames or ()):
        raise ValueError(f"{path.name} is not {what}'s (its columns are {reader.fieldnames})")
    return rows


class TableStudy:
    """A table study's definition: the subclass names its table and files and trains one spec (``task``); the
    command line, the merge and the session are the same for all. Runs print one line each as they finish."""
    prog: str            # "python -m core.variants"
    what: str            # one run, in messages: "variant", "run"
    title: str           # the study, in messages: "a variant study"
    key: str             # the column that names a row's run ("variant", "run")
    ids: tuple[str, ...]  # the table, in its order
    fields: tuple[str, ...]  # the table's columns
    table: str           # the table's file in --out
    steps: int           # steps of every run, by default
    max_steps: int = 100_000  # the shipped studies took 1-2 CPU-hours: this is already days of CPU
    n_ctx: int = 128     # the widest run's window: the corpus must fill one in each part

    # ------------------------------------------------------------ what a study defines
    def task(self):
        """The top-level function that trains one TableSpec into its row (looked up when the study runs)."""
        raise NotImplementedError

    def outputs(self):
        """What the study writes into --out (core.training.cli_args.Outputs)."""
        raise NotImplementedError

    def write(self, out: Path, rows: list[dict], overwrite: bool) -> None:
        """Write the study's files from all its rows (rewritten whole after every run)."""
        raise NotImplementedError

    def line(self, row: dict) -> str:
        """What is printed as a run finishes."""
        raise NotImplementedError

    def spec(self, run: str, steps: int, text: str, corpus: str, out: Path) -> TableSpec:
        return TableSpec(run, steps, text=text, corpus=corpus)

    def order(self, specs: list[TableSpec]) -> list[TableSpec]:
        return specs  # in the order asked for: a free worker takes the next

    def prepare(self, out: Path, chosen: list[str], overwrite: bool) -> None:
        """Before any run, once the merge is judged (OSError for a folder that cannot be made)."""
        out.mkdir(parents=True, exist_ok=True)

    def summary(self, rows: list[dict], kept: list[dict], seconds: float, text: str, out: Path) -> str:
        return ""  # a last line, after every run ("" for none)

    # ------------------------------------------------------------ the merge
    def read(self, out: Path) -> list[dict]:
        """The rows of the study in ``out`` ([] where there is none)."""
        path = out / self.table
        return read_table(path, self.fields, self.title) if path.is_file() else []

    def rows_to_keep(self, out: Path, steps: int, corpus: str, chars: int, chosen: list[str]) -> list[dict]:
        """The rows of the study in ``out`` that a session running ``chosen`` keeps: every other run. ValueError,
        saying why, for a study these runs cannot join: one that cannot be read, or runs of another length (one
        table compares runs trained alike, and dropping its rows silently lost the shipped study)."""
        rows = self.read(out)
        other = sorted({str(r.get("steps")) for r in rows} - {str(steps)})
        if other:
            raise ValueError(f"--out {out} holds a study of {', '.join(other)} steps a run; --steps {steps} would put "
                             f"runs of different lengths in one table: give its --steps to add or replace "
                             f"{self.what}s in it")
        return [r for r in rows if r[self.key] not in chosen]

    def ordered(self, rows: list[dict]) -> list[dict]:
        """The rows in the table's order, whatever order the runs finished in."""
        place = {run: i for i, run in enumerate(self.ids)}
        return sorted(rows, key=lambda r: place.get(r[self.key], len(place)))

    # ------------------------------------------------------------ the session
    def refuse(self, message: str) -> int:
        sys.stderr.write(f"{self.prog}: error: {message}\n")
        return 2  # as argparse's own errors

    def run(self, args) -> int:
        """Train the runs of parsed ``args`` (core.training.cli_args.study_parser's, checked by study_problem)
        into ``args.out``; 0 once every run is in, 2 with one line on stderr for input it cannot use."""
        steps = self.steps if args.steps is None else args.steps
        chosen = chosen_runs(args.only, self.ids)
        out = Path(args.out)
        # before the corpus is read: a folder of other things is refused, whatever the runs would be
        problem = out_problem(out, self.outputs(), args.overwrite, inputs=[args.corpus])
        if problem:
            return self.refuse(problem)
        corpus = args.corpus or corpora.shakespeare_path()
        if corpus is None:
            return self.refuse("no --corpus given and Tiny Shakespeare not found (set TE_CORPUS)")
        try:
            text = read_text_file(corpus)
        except (OSError, ValueError) as e:
            return self.refuse(f"cannot read the corpus: {e}")
        need = min_corpus_chars(self.n_ctx)  # a token is a character at least: fewer cannot fill a window
        if len(text) < need:  # here, not as a traceback from every worker
            return self.refuse(f"--corpus {corpus} is too short: {len(text):,} characters, and a run's {self.n_ctx}-"
                               f"token window needs at least {need:,} for the training and held-out parts")
        try:  # before any run: the study there is merged into, or refused, never lost to a run of one
            kept = [] if args.overwrite else self.rows_to_keep(out, steps, Path(corpus).name, len(text), chosen)
        except ValueError as e:
            return self.refuse(f"{e}; or --overwrite to start the study afresh")
        try:
            self.prepare(out, chosen, args.overwrite)
        except OSError as e:
            return self.refuse(f"--out {out}: {e.strerror or e}")
        specs = self.order([self.spec(run, steps, text, Path(corpus).name, out) for run in chosen])
        rows, t0 = [], time.perf_counter()
        try:
            engine = study_engines.make_engine(args.engine or "local", args.workers, task=self.task())
            engine.check()
            done = list(kept)  # the table as each_row saves it: the kept rows, then this session's
            for row in each_row(engine, specs, done, lambda all_rows: self.write(out, all_rows, args.overwrite)):
                rows.append(row)
                print(self.line(row), flush=True)
        except StudyError as e:  # Ray missing or unreachable, a worker killed: in words
            return self.refuse(f"{e} ({len(rows)} {self.what}s written to {out})")
        last = self.summary(rows, kept, time.perf_counter() - t0, text, out)
        if last:
            print(last)
        return 0
