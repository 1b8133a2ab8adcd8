"""Features forming: when, during a model's training, does each of its final SAE's features first appear?

For a model folder with training snapshots (core.nn.snapshots), a small SAE (the final one's site, width and k,
fewer steps) is trained on the model at each of a few snapshot steps, on the same held-out windows. Each feature
of the final SAE is matched to its best partner in each snapshot SAE by decoder cosine,

    c_i(step) = max_j  W_dec_final[i] . W_dec_step[j]        (rows of unit norm)

and it "has formed" at the first step where c_i ≥ THRESHOLD (0.7, as the issue asks).

Matching is noisy, and the result says how much: a second small SAE at the last step studied (the final weights,
by default) with another seed gives the cosine a feature reaches when nothing changed but the SAE's own training
(``seed_cosine``). A feature whose two cosines there differ a lot is unstable: its formation step means little. For reference, the best
cosine of a random direction among d_sae random ones in d_in dimensions (``chance``) is about 0.4 for the shipped
model's 512 in 64. Every snapshot SAE starts from a seed of its own, never the final SAE's: two SAEs from one
seed share their initial decoder, and a latent that barely trained would match its twin for no reason."""
from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np
import torch

from core.features.activations import collect
from core.data.held_out import model_held_out
from core.analysis.sae import SAE
from core.features.job import BackgroundJob
from core.jobs.thread import Progress
from core.features.train import SAESettings, memory_estimate, split_held_out, train_on
from core.nn.checkpoint import load_checkpoint, read_config
from core.nn.snapshots import checkpoint_steps

THRESHOLD = 0.7
MIN_STEPS = 6            # snapshot steps a study uses at least (the "six or more")
FORMING_STEPS = 400      # optimiser steps of each snapshot's SAE: a tenth of a minute-long run on the shipped model
FORMING_BATCH = 1024
FORMING_VECTORS = 200_000  # activations each snapshot's SAE trains on, at most
TOP_FEATURES = 12        # features followed by default: the final SAE's most frequent


@dataclass(frozen=True)
class Forming:
    site: str
    steps: list[int]          # the snapshot steps studied, ascending
    features: list[int]       # the final SAE's features followed
    frequency: list[float]    # share of held-out tokens each fires on (final model, final SAE)
    cosine: np.ndarray        # (S, F) best decoder cosine of each followed feature in each step's SAE
    match: np.ndarray         # (S, F) the index of that best partner
    seed_cosine: np.ndarray   # (2, F) at the last step studied: two small SAEs of different seeds
    chance: float             # mean best cosine of a random direction: what matching finds in noise
    threshold: float = THRESHOLD

    @property
    def formed(self) -> list[int | None]:
        return formation_steps(self.steps, self.cosine, self.threshold)

    @property
    def seed_gap(self) -> np.ndarray:
        """(F,) how far the two seeds at the last step disagree on each feature's cosine."""
        return np.abs(self.seed_cosine[0] - self.seed_cosine[1])


def match_features(final_sae: SAE, other_sae: SAE) -> tuple[torch.Tensor, torch.Tensor]:
    """(best cosine (d_sae_final,), index of that best partner in ``other_sae`` (d_sae_final,)) of each feature of
    ``final_sae``, by decoder direction."""
    if final_sae.config.d_in != other_sae.config.d_in:
        raise ValueError(f"the two SAEs read vectors of {final_sae.config.d_in} and {other_sae.config.d_in} numbers")
    a = torch.nn.functional.normalize(final_sae.W_dec.detach(), dim=1)  # (F, d_in), unit rows
    b = torch.nn.functional.normalize(other_sae.W_dec.detach(), dim=1)  # (G, d_in)
    best = (a @ b.T).max(dim=1)                                          # over (F, G)
    return best.values, best.indices


def formation_steps(steps: list[int], cosine, threshold: float = THRESHOLD) -> list[int | None]:
    """For each column of ``cosine`` (S, F), the first of ``steps`` (S, ascending) whose cosine ≥ ``threshold``;
    None where it never reaches it."""
    c = np.asarray(cosine, dtype=float)
    if c.shape[0] != len(steps):
        raise ValueError(f"{len(steps)} steps and {c.shape[0]} rows of cosines")
    out = []
    for f in range(c.shape[1]):
        hit = np.nonzero(c[:, f] >= threshold)[0]
        out.append(int(steps[hit[0]]) if len(hit) else None)
    return out


def pick_steps(steps: list[int], count: int = MIN_STEPS) -> list[int]:
    """``count`` of a model's snapshot steps, spread evenly over the list (the snapshots are log-spaced already),
    the last always among them. Steps before 1% of training are left out while enough others remain: the shipped
    model's loss falls from 4.17 to 2.50 nats in its first 140 of 12,000 steps, a model that has learnt letter
    frequencies and little else, and half of the log-spaced snapshots fall there."""
    trained = sorted(s for s in steps if s > 0)
    later = [s for s in trained if s >= trained[-1] / 100] if trained else []
    trained = later if len(later) >= count else trained
    if len(trained) <= count:
        return trained
    at = np.linspace(0, len(trained) - 1, count).round().astype(int)  # evenly over the (log-spaced) list
    return sorted({trained[i] for i in at})


def chance_cosine(d_in: int, d_sae: int, n: int = 256, seed: int = 0) -> float:
    """The mean best cosine of ``n`` random directions among ``d_sae`` random ones in ``d_in`` dimensions."""
    g = torch.Generator().manual_seed(seed)
    a = torch.nn.functional.normalize(torch.randn(n, d_in, generator=g), dim=1)
    b = torch.nn.functional.normalize(torch.randn(d_sae, d_in, generator=g), dim=1)
    return float((a @ b.T).max(dim=1).values.mean())  # (n, d_in) @ (d_in, d_sae) -> (n, d_sae)


def small_settings(final_sae: SAE, steps: int | None = None) -> SAESettings:
    """The settings of a snapshot's SAE: the final one's shape, ``steps`` (default FORMING_STEPS) steps."""
    c = final_sae.config
    return SAESettings(d_sae=c.d_sae, k=c.k, kind=c.kind, l1=c.l1 or 3e-3, steps=steps or FORMING_STEPS,
                       batch_size=FORMING_BATCH,
                       max_vectors=FORMING_VECTORS)


def snapshot_sae(model, windows: torch.Tensor, site: str, settings: SAESettings, progress=None,
                 should_stop=None) -> SAE:
    """A small SAE trained on ``site`` of ``model`` over ``windows``."""
    acts = collect(model, windows, site, settings.max_vectors, settings.max_bytes)
    sae = SAE(settings.config(site, acts.shape[1]), generator=torch.Generator().manual_seed(settings.seed))
    train_on(sae, acts, settings, progress, should_stop)
    return sae.requires_grad_(False)


@torch.no_grad()
def firing_frequency(sae: SAE, acts: torch.Tensor) -> torch.Tensor:
    """(d_sae,) the share of the vectors ``acts`` (N, d_in) on which each feature of ``sae`` fires."""
    fires = torch.zeros(sae.config.d_sae)
    for i in range(0, len(acts), 8192):
        fires += (sae.encode(acts[i:i + 8192]) > 0).sum(0)
    return fires / max(1, len(acts))


def forming_memory(config, final_sae: SAE, held_tokens: int, settings: SAESettings) -> int:
    """Bytes the study holds at its peak: one small SAE's training, plus the final model's activations."""
    return memory_estimate(config, final_sae.site, held_tokens, settings) + 4 * final_sae.config.d_in * min(
        held_tokens, settings.max_vectors)


def run_forming(folder, final_sae: SAE, steps: list[int] | None = None, features: list[int] | None = None,
                n_top: int = TOP_FEATURES, sae_steps: int | None = None, seed: int = 1,
                progress: Progress | None = None) -> Forming:
    """The study on the model saved in ``folder`` (with snapshots) and its final SAE ``final_sae``. ``steps``: the
    snapshot steps (default ``pick_steps``); ``features``: the final SAE's features to follow (default its
    ``n_top`` most frequent on the held-out text). ``progress``: a job's (core.features.job.Progress)."""
    site = final_sae.site
    steps = steps if steps is not None else pick_steps(checkpoint_steps(folder))
    if len(steps) < 1:
        raise ValueError(f"{folder}: the model kept no training snapshots")
    model, tok = load_checkpoint(folder)
    _, _, training = read_config(folder)
    train_part, _ = split_held_out(model_held_out(model, tok, training))
    windows = train_part.windows
    settings = small_settings(final_sae, sae_steps)
    sae_steps = settings.steps
    freq_all = firing_frequency(final_sae, collect(model, windows, site, settings.max_vectors))  # (d_sae,)
    if features is None:
        features = freq_all.argsort(descending=True)[:n_top].tolist()
    freq = freq_all[torch.tensor(features, dtype=torch.long)].tolist()
    idx = torch.tensor(features, dtype=torch.long)
    total = (len(steps) + 1) * sae_steps  # one SAE per step, and the second seed on the final weights
    done = [0]

    def train_one(m, s: SAESettings, label: str) -> tuple[torch.Tensor, torch.Tensor]:
        if progress is not None:
            progress.phase(label, total)
            report = lambda step, _steps, loss: progress.step(done[0] + step, total, loss)  # noqa: E731
            stop = progress.stopped
        else:
            report = stop = None
        sae = snapshot_sae(m, windows, site, s, report, stop)
        if progress is not None:
            progress.check()
        done[0] += sae_steps
        cos, at = match_features(final_sae, sae)
        return cos[idx], at[idx]

    rows = []
    for i, step in enumerate(steps):
        m, _ = load_checkpoint(folder, step=step)
        rows.append(train_one(m, replace(settings, seed=seed + i), f"training an SAE at step {step:,}"))
    # the noise: the last snapshot once more, with another seed; only the SAE's own training differs
    seed_row = train_one(m, replace(settings, seed=seed + len(steps)), f"a second seed at step {steps[-1]:,}")
    seeds = torch.stack([rows[-1][0], seed_row[0]]).numpy()
    return Forming(site=site, steps=list(steps), features=list(features), frequency=[float(f) for f in freq],
                   cosine=torch.stack([r[0] for r in rows]).numpy(), match=torch.stack([r[1] for r in rows]).numpy(),
                   seed_cosine=seeds, chance=chance_cosine(final_sae.config.d_in, final_sae.config.d_sae))


def forming_job(folder, final_sae: SAE, config, steps: list[int] | None = None, n_top: int = TOP_FEATURES,
                sae_steps: int | None = None, owner: str | None = None, held_tokens: int | None = None,
                threads: int | None = None) -> BackgroundJob:
    """The study as a background job (core.features.job): ``result`` is its Forming."""
    steps = steps if steps is not None else pick_steps(checkpoint_steps(folder))
    if len(steps) < 1:
        raise ValueError("this model kept no training snapshots, so there is nothing to follow its features through")
    settings = small_settings(final_sae, sae_steps)
    sae_steps = settings.steps
    memory = forming_memory(config, final_sae, held_tokens or settings.max_vectors, settings)

    def work(progress: Progress):
        return run_forming(folder, final_sae, steps, None, n_top, sae_steps, progress=progress)

    return BackgroundJob(work, f"following features forming over {len(steps)} snapshots", (len(steps) + 1) * sae_steps,
                         memory, owner, threads)


def forming_seconds(n_steps: int, sae_steps: int, step_s: float) -> float:
    """The study's expected time: one small SAE per snapshot and one more, at ``step_s`` seconds a step (a pace
    measured by core.features.job.pace), collection not counted (under a second each on the shipped models)."""
    return math.ceil((n_steps + 1) * sae_steps * step_s)
