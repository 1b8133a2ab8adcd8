"""SAE jobs in the background (core.features.job) and features forming (core.features.forming): a job trains and
finishes with the health numbers, stops mid-run with no result, refuses a second job of one session, one past the
server's slots and one over the memory budget, each in words; decoder matching finds a known permutation; the
formation step of a made-up sequence of SAEs is the step where its cosine was built to cross 0.7."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from core.features import job as job_mod
from core.features.forming import Forming, formation_steps, forming_job, match_features, pick_steps
from core.analysis.sae import SAE, SAEConfig
from core.features.job import SAEJob
from core.jobs import JobBusy, jobs, running_jobs
from core.features.train import SAESettings
from core.nn.checkpoint import load_checkpoint, read_config
from core.nn.config import ModelConfig
from core.nn.model import Transformer
from core.nn.model_store import save_checkpoint
from core.nn.snapshots import checkpoint_steps, snapshot_state
from core.nn.tokenizer import CharTokenizer
from tests.polling import wait_until
from tests.snapshot_models import made_up_text

SITE = "blocks.0.hook_resid_post"
QUICK = SAESettings(d_sae=32, k=4, steps=30, batch_size=128, max_vectors=4096)
LONG = SAESettings(d_sae=32, k=4, steps=job_mod.MAX_STEPS, batch_size=128, max_vectors=4096)


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    """A tiny untrained model with eight snapshots of its own (each the weights nudged further): built, not
    trained, to keep the file fast; nothing here needs a model that learnt anything."""
    tok = CharTokenizer.from_text(made_up_text())
    torch.manual_seed(0)
    model = Transformer(ModelConfig(vocab_size=tok.vocab_size, n_ctx=32, d_model=16, n_heads=2, n_layers=2)).eval()
    snaps = {}
    for i, step in enumerate([0, 1, 2, 4, 8, 16, 32, 64]):
        with torch.no_grad():
            for p in model.parameters():
                p.add_(0.01 * i * torch.randn_like(p))
        snaps[step] = snapshot_state(model)
    return save_checkpoint(tmp_path_factory.mktemp("snapmodel") / "m", model, tok, {"steps": 64}, snapshots=snaps)


@pytest.fixture(scope="module")
def loaded(folder):
    model, tok = load_checkpoint(folder)
    return model, tok, read_config(folder)[2]


@pytest.fixture(autouse=True)
def _no_jobs_left():
    yield
    for j in jobs("sae"):  # a failed test must not leave its job holding a slot for the next
        j.stop(wait=30)


def test_job_trains_and_finishes_with_metrics(loaded):
    model, tok, training = loaded
    job = SAEJob(model, tok, SITE, training, QUICK, owner="a").start()
    assert job.join(120)
    s = job.status()
    assert s.state == "finished", s.message
    assert s.step == s.steps == QUICK.steps
    trained = job.result
    assert trained.sae.W_dec.shape == (32, 16)
    for name in ("l0", "explained_variance", "dead_fraction", "ce_loss_score", "mse"):
        assert np.isfinite(trained.metrics[name]), name
    assert trained.metrics["l0"] <= 4  # TopK k=4: never more than four latents at a token
    assert running_jobs("sae") == 0  # the cores were given back


def test_job_stops_mid_run_with_no_result(loaded):
    model, tok, training = loaded
    job = SAEJob(model, tok, SITE, training, LONG, owner="a").start()
    wait_until(lambda: job.status().step > 0, timeout=60)
    job.stop()
    assert job.join(60)
    s = job.status()
    assert s.state == "stopped"
    assert 0 < s.step < LONG.steps
    assert job.result is None


def test_second_job_of_a_session_is_refused(loaded):
    model, tok, training = loaded
    first = SAEJob(model, tok, SITE, training, LONG, owner="a").start()
    with pytest.raises(JobBusy, match="one person may have 1 such job"):
        SAEJob(model, tok, SITE, training, QUICK, owner="a").start()
    first.stop(wait=60)
    again = SAEJob(model, tok, SITE, training, QUICK, owner="a").start()  # once it ended, the session may start
    assert again.join(120) and again.status().state == "finished"


def test_a_job_past_the_cores_waits_in_line(loaded):
    from core.serve import cores
    previous = cores.set_server_budget(cores.CoreBudget(cores=2, job_cores=1))
    model, tok, training = loaded
    first = SAEJob(model, tok, SITE, training, LONG, owner="a").start()
    second = SAEJob(model, tok, SITE, training, QUICK, owner="b").start()
    try:
        assert second.status().state == "queued" and "next" in second.status().words
        first.stop(wait=60)
        assert second.join(120) and second.status().state == "finished"
    finally:
        first.stop(wait=60)
        cores.set_server_budget(previous)


def test_job_over_the_memory_budget_is_refused(loaded, monkeypatch):
    model, tok, training = loaded
    monkeypatch.setenv("TE_RUN_MEMORY", "400M")
    # 131,072 latents: a (2,048, 131,072) batch of activations alone is 1 GiB, far over 400 MiB
    big = SAESettings(d_sae=131_072, k=4, steps=10)
    job = SAEJob(model, tok, SITE, training, big, owner="a")
    with pytest.raises(ValueError, match=r"needs about .* the server allows 400 MiB"):
        job.start()
    assert running_jobs("sae") == 0 and job.status().state == "new"


def test_bad_settings_are_refused_in_words(loaded):
    model, tok, training = loaded
    with pytest.raises(ValueError, match="k must be"):
        SAEJob(model, tok, SITE, training, SAESettings(d_sae=8, k=0), owner="a")
    with pytest.raises(ValueError, match="the model has 2 blocks"):
        SAEJob(model, tok, "blocks.5.hook_resid_post", training, QUICK, owner="a")


def test_a_failing_job_says_why(loaded):
    model, tok, training = loaded

    def broken(progress):
        raise RuntimeError("the disk caught fire")
    job = job_mod.BackgroundJob(broken, "a test job", 10, 0, owner="a").start()
    assert job.join(30)
    s = job.status()
    assert s.state == "failed" and "the disk caught fire" in s.message and job.result is None


# ------------------------------------------------------------------ matching and formation
def _sae(w_dec: torch.Tensor) -> SAE:
    sae = SAE(SAEConfig(site=SITE, d_in=w_dec.shape[1], d_sae=w_dec.shape[0], k=2))
    with torch.no_grad():
        sae.W_dec.copy_(w_dec)
    return sae


def test_match_features_finds_a_permutation_under_noise():
    g = torch.Generator().manual_seed(0)
    d_in, d_sae = 32, 48
    base = torch.nn.functional.normalize(torch.randn(d_sae, d_in, generator=g), dim=1)
    perm = torch.randperm(d_sae, generator=g)
    # other[perm[i]] = base[i] + noise: feature i of the first SAE is feature perm[i] of the second
    other = torch.empty_like(base)
    other[perm] = base + 0.05 * torch.randn(d_sae, d_in, generator=g)
    other = torch.nn.functional.normalize(other, dim=1)
    cos, idx = match_features(_sae(base), _sae(other))
    assert torch.equal(idx, perm)
    expected = (base * other[perm]).sum(1)  # the cosine with the true partner, by hand
    assert torch.allclose(cos, expected, atol=1e-6)
    assert cos.min() > 0.9


def test_formation_step_is_where_the_cosine_crosses():
    g = torch.Generator().manual_seed(1)
    d_in, d_sae = 24, 16
    final = torch.nn.functional.normalize(torch.randn(d_sae, d_in, generator=g), dim=1)
    noise = torch.nn.functional.normalize(torch.randn(d_sae, d_in, generator=g), dim=1)
    steps = [10, 20, 50, 100, 200, 500]
    # feature i's direction at step s: final mixed with noise at weight t; t rises to 1, earlier for lower i
    cross_at = {0: 20, 1: 100, 2: 500}
    saes = []
    for s in steps:
        rows = noise.clone()
        for f, at in cross_at.items():
            t = 0.95 if s >= at else 0.2  # cos(final, 0.95 final + 0.31 noise) ≈ 0.95; 0.2 -> about 0.2
            rows[f] = t * final[f] + (1 - t * t) ** 0.5 * noise[f]
        saes.append(_sae(rows))
    cos = np.stack([match_features(_sae(final), sae)[0][:3].numpy() for sae in saes])  # (S, 3)
    assert formation_steps(steps, cos) == [20, 100, 500]
    assert formation_steps(steps, np.full((6, 1), 0.3)) == [None]


def test_pick_steps_spreads_over_later_training():
    assert pick_steps([0, 1, 2, 3, 4, 7, 12, 19, 32, 52, 86, 140, 230, 377, 618, 1013, 1661, 2723, 4465, 7320,
                       12000]) == [140, 377, 1013, 1661, 4465, 12000]
    assert pick_steps([0, 5, 10]) == [5, 10]  # fewer than six: all the trained ones


def test_forming_job_on_a_tiny_model(folder):
    final, _ = train_small_final(folder)
    job = forming_job(folder, final, load_checkpoint(folder)[0].config, n_top=5, sae_steps=20, owner="f").start()
    assert job.join(180)
    s = job.status()
    assert s.state == "finished", s.message
    r: Forming = job.result
    assert r.steps == pick_steps(checkpoint_steps(folder)) and len(r.steps) == 6
    assert r.cosine.shape == (6, 5) and r.seed_cosine.shape == (2, 5)
    assert ((r.cosine > 0) & (r.cosine <= 1 + 1e-5)).all()
    assert r.frequency == sorted(r.frequency, reverse=True)  # the most frequent features, in order
    assert 0.2 < r.chance < 0.8


def train_small_final(folder):
    from core.features.train import train_sae
    model, tok = load_checkpoint(folder)
    trained = train_sae(model, tok, SITE, read_config(folder)[2], QUICK)
    return trained.sae, trained.metrics


def test_forming_figure_marks_the_formation_step():
    from pages.features.forming import forming_figure, forming_rows
    cos = np.array([[0.2, 0.1], [0.75, 0.3], [0.9, 0.5]])  # feature 7 crosses 0.7 at step 100, feature 9 never
    r = Forming(site=SITE, steps=[10, 100, 1000], features=[7, 9], frequency=[0.5, 0.1], cosine=cos,
                match=np.zeros((3, 2), dtype=int), seed_cosine=np.array([[0.9, 0.5], [0.8, 0.6]]), chance=0.37)
    fig = forming_figure(r)
    assert fig.layout.xaxis.type == "log"
    stars = [t for t in fig.data if t.marker.symbol == "star"]
    assert len(stars) == 1 and list(stars[0].x) == [100] and list(stars[0].y) == [0.75]
    assert {s.y0 for s in fig.layout.shapes} == {0.7, 0.37}  # the threshold line and chance
    assert [row["formed at step"] for row in forming_rows(r)] == [100, None]
