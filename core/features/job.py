"""SAE work in the background of a page: training one autoencoder (``SAEJob``), or the features-forming study
(core.features.forming), each in a thread of the server, polled by the page.

A thread (core.jobs.thread.ThreadJob), not a process: an SAE run is 15-60 s of large matrix products, during which
torch releases the GIL, so the pages stay responsive (measured on a shared two-core machine: a 128-token forward of
the shipped model took a median 2.0 ms with a job running, 1.2 and 2.4 ms without, before and after). A thread reads
the model the page already holds (no second copy, no 340 MB interpreter, no 2-3 s spawn), and its result is an SAE
the page can use at once, with nothing pickled. Its stop and pause are read between two optimiser steps.

Rules, checked before a job starts: its memory (core.features.train.memory_estimate) within the budget a training
run has (TE_RUN_MEMORY, core.training.job_settings.memory_budget), one SAE job per owner (a browser session,
core.jobs.JobBusy); its cores come from the server's one budget (core.serve.cores), and it waits in line for them
when none are free."""
from __future__ import annotations

import math
import time
from dataclasses import replace
from typing import Callable

import torch

from core.analysis.sae import SAE
from core.analysis.sites import Site, as_site
from core.features.explain import explain_sae
from core.features.train import EVAL_EVERY, EVAL_TOKENS, SAESettings, memory_estimate, train_on, train_sae
from core.serve.fmt import binary_bytes
from core.data.corpus import TRAIN_FRACTION
from core.training.job_settings import allowance_words
from core.data.budget import memory_budget
from core.jobs.thread import Progress, ThreadJob
from core.serve.threads import training_threads

MAX_STEPS = 20_000       # a form's ceiling: at the default batch, about 15 minutes on one core


class BackgroundJob(ThreadJob):
    """An SAE job (core.jobs.thread.ThreadJob): ``memory``, the bytes it will hold at its peak, is checked against
    the server's budget at ``start`` (ValueError in words); one per owner (training an SAE or following features
    forming), cores from the server's budget (core.serve.cores), queued when none are free."""
    kind = "sae"

    def __init__(self, work: Callable[[Progress], object], what: str, steps: int, memory: int,
                 owner: str | None = None, threads: int | None = None):
        super().__init__(work, what, steps, owner, threads or training_threads())
        self.memory = memory

    def start(self) -> "BackgroundJob":
        problem = memory_problem(self.memory, self.what)
        if problem:
            raise ValueError(problem)
        return super().start()


def memory_problem(need: int, what: str = "this job") -> str | None:
    """Why a job of ``need`` bytes may not start on this server; None when it may."""
    try:
        budget = memory_budget()
    except ValueError as e:
        return f"No SAE job can start: {e}."
    if budget is None or need <= budget:
        return None
    return (f"{what[0].upper() + what[1:]} needs about {binary_bytes(need)} of memory; the server allows "
            f"{binary_bytes(budget)} per run (TE_RUN_MEMORY). Fewer latents, a smaller batch or a narrower site "
            "needs less.")


def memory_words(need: int) -> str:
    try:
        return f"It needs about {binary_bytes(need)} of memory; the server {allowance_words()}."
    except ValueError as e:
        return f"It needs about {binary_bytes(need)} of memory; {e}."


def held_tokens_bound(held_chars: int) -> int:
    """At most this many training vectors from a corpus of ``held_chars`` characters: a token is at least a
    character, and the held-out part is the last 10%."""
    return math.ceil(held_chars * (1 - TRAIN_FRACTION))


def check_settings(config, site: Site | str, settings: SAESettings) -> SAESettings:
    """``settings`` if an SAE of them can be trained on ``site``; ValueError in words otherwise."""
    site = as_site(config, site)  # a Site passes as it is; a name is checked here, once
    settings.config(site, site.width)
    if settings.steps > MAX_STEPS:
        raise ValueError(f"steps must be at most {MAX_STEPS:,}, got {settings.steps:,}")
    return settings


class SAEJob(BackgroundJob):
    """Training one SAE on ``site`` of ``model`` (core.features.train.train_sae) in the background; ``result`` is
    its TrainedSAE (sae, metrics, curve). ``corpus_chars``: the length of the corpus its held-out text comes from,
    for the memory estimate (None: the cap on collected vectors)."""

    def __init__(self, model, tokenizer, site: Site | str, training: dict | None, settings: SAESettings,
                 owner: str | None = None, corpus_chars: int | None = None, threads: int | None = None):
        check_settings(model.config, site, settings)
        held = settings.max_vectors if corpus_chars is None else held_tokens_bound(corpus_chars)
        memory = memory_estimate(model.config, site, held, settings)

        def work(progress: Progress):
            progress.phase("collecting activations", settings.steps)

            def report(step, steps, loss):
                progress.phase("training")
                progress.step(step, steps, loss)
            trained = train_sae(model, tokenizer, site, training, settings, progress=report,
                                should_stop=progress.stopped)
            progress.check()  # stopped during training: no result (train_sae still measured what it had)
            progress.phase("explaining the latents")  # explanations.json, saved beside the SAE with it
            self.explanations = explain_sae(model, tokenizer, trained.sae, training)
            return trained

        super().__init__(work, f"training an SAE on {site}", settings.steps, memory, owner, threads)
        self.site, self.settings = site, settings
        self.explanations = None  # core.features.explain's, once trained: a page saves them with the SAE


# An SAE job is more than its steps (measured on the shipped models: the form said "under a minute" from the steps
# alone while the job took 58-85 s): the model's passes to collect the activations and to measure the result, at
# about JOB_FLOPS, and each step's bookkeeping beyond the timed ones (the dead latents' AuxK loss, the progress)
JOB_FLOPS = 2e10
STEP_OVERHEAD = 1.05


def job_seconds(model, settings: SAESettings, held_tokens: int, step_s: float) -> float:
    """Seconds an SAE job of ``settings`` should take on ``model``, whose held-out text has at most ``held_tokens``
    tokens: its steps at ``step_s`` each (``pace``), and the model's passes over the held-out text: the four fifths it
    trains on collected, then the evaluation's three runs and its activations collected again."""
    params = sum(p.numel() for p in model.parameters())
    collected = min(settings.max_vectors, held_tokens * (EVAL_EVERY - 1) // EVAL_EVERY)
    measured = 4 * min(EVAL_TOKENS, held_tokens // EVAL_EVERY)
    return settings.steps * step_s * STEP_OVERHEAD + (collected + measured) * 2 * params / JOB_FLOPS


def pace(d_in: int, settings: SAESettings, probe_steps: int = 3, rounds: int = 3) -> float:
    """Seconds one optimiser step of an SAE of ``settings`` on ``d_in``-wide activations takes here, on this
    thread's torch threads: a few steps timed on random activations (after one that warms the kernels up), the
    median of ``rounds`` timings (on a shared machine, one timing of 4 steps read 29 and 55 ms for the same SAE)."""
    g = torch.Generator().manual_seed(0)
    acts = torch.randn(settings.batch_size * 2, d_in, generator=g)  # (2B, d_in)
    sae = SAE(settings.config("blocks.0.hook_resid_post", d_in), generator=g)
    train_on(sae, acts, replace(settings, steps=1))  # warm-up: the first step pays for allocations
    times = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        train_on(sae, acts, replace(settings, steps=probe_steps))
        times.append((time.perf_counter() - t0) / probe_steps)
    return sorted(times)[len(times) // 2]
