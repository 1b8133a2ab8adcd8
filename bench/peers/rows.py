"""bench.run's peer rows (issue 60): ours against SAELens, circuit-tracer and TransformerLens, each peer in its own
environment (bench/peers/.venv, a subprocess: bench/peers/side.py), measured in the same run in alternating rounds,
with the threads and the load beside every figure. Where the environment is missing, or a peer fails, its row says so
(``skipped``, the reason) and has no figures: never faked.

- ``run_with_cache``, every hook, 64 tokens, the shipped character model's weights in both (TransformerLens reads
  them through its own GPT-2 conversion; the row checks the two caches agree).
- the attribution graph, 1 thread, the shipped model and transcoders, circuit-tracer's ``attribute`` on a
  ReplacementModel of the same weights and transcoders (core/features/README.md's recipe), the same prompt and logit
  targets: 64 tokens with our graph's own targets, and 14 tokens with ten (the model's top ten next tokens); time and
  peak memory (the growth of the process's peak resident memory).
- the TopK SAE trainer (core.features.train.train_on) against SAELens's SAETrainer: the same activations (the
  shipped model's blocks.0.hook_resid_post on its held-out text), steps, batch, k, learning rate and its decay over
  the last fifth, threads; both explained variances on the same held-out activations.
"""
from __future__ import annotations

import json
import tempfile
import time
from statistics import median
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from bench.peers import Peer, missing

ROOT = Path(__file__).resolve().parent.parent.parent
MODEL = ROOT / "assets" / "models" / "shakespeare-char"
PROMPT = "The king is dead. Long live the king! The king is dead. Long live the king! The king is dead."
NAMES = ("run_with_cache vs TransformerLens", "attribution graph vs circuit-tracer", "SAE trainer vs SAELens")
SAE_STEPS, SAE_BATCH, SAE_LATENTS, SAE_K, SAE_LR = 512, 2048, 512, 12, 2e-3


def skipped(name: str, why: str) -> dict:
    print(f"  {name:<52} skipped: {why}", flush=True)
    return {"benchmark": f"peers: {name}", "skipped": why, "met": None}


def main(quick: bool, record, results: list, peak_growth) -> None:
    why = missing()
    if why:
        results.extend(skipped(n, why) for n in NAMES)
        return
    from core.nn.checkpoint import load_checkpoint

    model, tok = load_checkpoint(MODEL)
    model.eval()
    threads = torch.get_num_threads()
    with tempfile.TemporaryDirectory(prefix="te-peers-") as tmp:
        tmp = Path(tmp)
        try:
            peer = Peer(threads, tmp / "side.log")
        except Exception as e:  # noqa: BLE001 - the environment is there but does not start: every row says why
            results.extend(skipped(n, f"the peers' side did not start: {e}") for n in NAMES)
            return
        with peer:
            print(f"  peers: {peer.hello['versions']}")
            for name, row in zip(NAMES, (cache_row, attribution_row, sae_row)):
                folder = tmp / name.split()[0]
                folder.mkdir()
                try:
                    row(quick, record, peak_growth, peer, folder, model, tok)
                except Exception as e:  # noqa: BLE001 - a peer that fails is skipped with the reason, never faked
                    results.append(skipped(name, f"{type(e).__name__}: {e}"))
                finally:
                    torch.set_num_threads(threads)


def write_model(folder: Path, model, ids: list[int]) -> None:
    """Our weights as GPT-2's tensors (core.nn.hf.export_state) and TransformerLens's config of the same model."""
    from core.nn.hf import export_state

    c = model.config
    save_file(export_state(model), folder / "gpt2.safetensors")
    act = {"relu": "relu", "gelu_tanh": "gelu_new", "gelu": "gelu"}[c.activation]
    (folder / "tl_config.json").write_text(json.dumps(dict(
        n_layers=c.n_layers, d_model=c.d_model, n_heads=c.n_heads, d_head=c.d_model // c.n_heads, d_mlp=c.d_ff,
        n_ctx=c.n_ctx, d_vocab=c.vocab_size, act_fn=act, normalization_type="LN", eps=c.ln_eps,
        positional_embedding_type="standard", default_prepend_bos=False, device="cpu")))
    (folder / "tokens.json").write_text(json.dumps(ids))


def cache_row(quick, record, peak_growth, peer, folder, model, tok) -> None:
    from bench.run import median_time  # bench.run's own timer (it calls this module, so looked up here)

    ids = tok.encode(PROMPT * 2)[:64]
    write_model(folder, model, ids)
    hooks = peer.ask("load_cache", folder=str(folder))["hooks"]
    idx = torch.tensor([ids])  # (1, 64)
    with torch.no_grad():
        logits, cache = model.run_with_cache(idx)
    theirs = load_file(folder / "peer_cache.safetensors")
    common = [k for k in model.hook_names() if k in theirs and not k.endswith("hook_attn_scores")]  # TL's: masked
    diff = max([(logits - theirs["logits"]).abs().max().item()] +
               [(cache[k] - theirs[k]).abs().max().item() for k in common])
    if diff > 1e-3:
        raise RuntimeError(f"TransformerLens's cache differs from ours by {diff:.2g}: not the same model")
    reps = 20 if quick else 100

    def ours():
        with torch.no_grad():
            model.run_with_cache(idx)
    ours()
    o, p = [], []
    for _ in range(3 if quick else 5):  # alternating rounds, each the median of reps calls inside its own process
        o.append(median_time(ours, reps))
        p.append(peer.ask("time_cache", reps=reps)["seconds"])
    record(f"peers: run_with_cache, every hook, 64 tokens ({len(cache)} vs {hooks} hooks)", median(o) * 1e3,
           median(p) * 1e3, "ms", higher_is_better=False,
           note=f"peer: TransformerLens {peer.hello['versions']['transformer-lens']} HookedTransformer with our "
                f"weights; {len(common)} common activations agree to {diff:.1e}")


ATTRIBUTION_CASES = ((14, 10), (64, None))  # (tokens, logit targets: None, our graph's own choice; else the top k);
# the small case first: after the large one, both sides' small graphs fit in memory their processes already hold


def attribution_row(quick, record, peak_growth, peer, folder, model, tok) -> None:
    """Each of ATTRIBUTION_CASES: our graph and circuit-tracer's on the same prompt and logit targets, one thread."""
    from core.analysis.transcoders import load_transcoders

    torch.set_num_threads(1)  # the condition: one thread on both sides
    tcs = load_transcoders(MODEL, model.config)
    for n_tokens, n_targets in ATTRIBUTION_CASES:
        case = folder / f"{n_tokens}-tokens"
        case.mkdir()
        attribution_case(quick, record, peak_growth, peer, case, model, tok, tcs, n_tokens, n_targets)


def attribution_case(quick, record, peak_growth, peer, folder, model, tok, tcs, n_tokens, n_targets) -> None:
    from core.analysis import attribution as A

    ids = tok.encode(PROMPT)[:n_tokens]
    targets = None
    if n_targets is not None:  # the model's top k next tokens, the same on both sides
        with torch.no_grad():
            targets = model(torch.tensor([ids])).logits[0, -1].topk(n_targets).indices.tolist()

    def ours():
        return A.attribution_graph(model, tcs, ids, logit_tokens=targets)
    g = ours()
    write_model(folder, model, ids)
    (folder / "targets.json").write_text(json.dumps([int(t) for t in g.logit_tokens]))
    (folder / "pieces.json").write_text(json.dumps(list(tok.pieces)))
    info = peer.ask("load_attribute", folder=str(folder), transcoders=str(MODEL / "transcoders"),
                    n_layers=model.config.n_layers, batch=512)
    agree = graph_agreement(g, load_file(folder / "peer_graph.safetensors"))
    rounds = 2 if quick else 3
    mine, theirs = [], []
    for _ in range(rounds):  # alternating: the load falls on both
        _, s, mib = peak_growth(ours)
        mine.append((s, mib))
        p = peer.ask("time_attribute", reps=1)
        theirs.append((p["seconds"], p["peak_mib"]))
    o_s, p_s = median([s for s, _ in mine]), median([s for s, _ in theirs])
    versions = peer.hello["versions"]
    k = len(g.logit_tokens)
    what = f"{len(ids)} tokens" + ("" if n_targets is None else f", {k} logit targets")
    note = (f"{len(ids)} tokens, {k} logit target{'s' if k != 1 else ''}; ours {g.n_features:,} features, "
            f"circuit-tracer {info['n_features']:,} (its adjacency {info['adjacency']} {info['adjacency_dtype']}, "
            f"batch 512; ours batch {A.BATCH}); {agree}; peer: circuit-tracer {versions['circuit-tracer']} "
            "attribute")
    record(f"peers: attribution graph, {what}, 1 thread", o_s, p_s, "s", target=1.5, higher_is_better=False,
           note=note)
    if all(m is not None for _, m in mine + theirs):
        grew, peer_grew = max(m for _, m in mine), max(m for _, m in theirs)
        name = f"peers: attribution graph peak memory, {what}"
        if max(grew, peer_grew) < 1:  # both calls fit in memory their processes already held (the larger case's)
            print(f"  {name:<52} not measurable: neither peak rose by 1 MiB", flush=True)
            return
        small = " (ours: under 1 MiB, the call fit in memory the process already held: shown as 1)" if grew < 1 else ""
        record(name, max(grew, 1.0), peer_grew, "MiB", target=1.0, higher_is_better=False,
               note=f"growth of the process's peak resident memory (VmHWM) over the call; ≥ 1: at most the peer's{small}")


def graph_agreement(g, theirs: dict) -> str:
    """How our graph's logit-to-feature edges compare with circuit-tracer's, feature by feature (circuit-tracer leaves
    position 0's features out: it takes the first token for a BOS); raises when they are not the same graph."""
    mine = {tuple(int(v) for v in f): i for i, f in enumerate(g.features)}
    feats = [tuple(int(v) for v in f) for f in theirs["features"]]
    missing = [f for f in feats if f not in mine]
    extra = [f for f in mine if f[1] != 0 and f not in set(feats)]
    if missing or extra:
        raise RuntimeError(f"not the same active features: {len(missing)} only circuit-tracer's, {len(extra)} only ours")
    ours = torch.as_tensor(g.adjacency[g.slices()["logits"]][:, [mine[f] for f in feats]], dtype=torch.float32)
    diff = (ours - theirs["logit_edges"]).abs().max().item()
    scale = ours.abs().max().item()
    if diff > 1e-3 * max(scale, 1.0):
        raise RuntimeError(f"the logit rows differ from circuit-tracer's by {diff:.2g} (largest edge {scale:.2g})")
    return f"the same {len(feats):,} features, logit edges agree to {diff:.1e} (largest {scale:.2g})"


def sae_row(quick, record, peak_growth, peer, folder, model, tok) -> None:
    from bench.features import SITE, shipped_activations
    from core.analysis.sae import SAE
    from core.features.train import SAESettings, reconstruction_stats, train_on

    acts, corpus = shipped_activations()
    perm = torch.randperm(len(acts), generator=torch.Generator().manual_seed(0))
    held_n = min(20_000, len(acts) // 5)
    train, held = acts[perm[held_n:]].contiguous(), acts[perm[:held_n]].contiguous()  # (N, 64) each, disjoint
    save_file({"train": train, "held": held}, folder / "acts.safetensors")
    steps = 64 if quick else SAE_STEPS
    settings = SAESettings(d_sae=SAE_LATENTS, k=SAE_K, steps=steps, batch_size=SAE_BATCH, lr=SAE_LR)
    ours, theirs = [], []
    for _ in range(1 if quick else 2):  # alternating rounds
        sae = SAE(settings.config(SITE, acts.shape[1]), generator=torch.Generator().manual_seed(0))
        t = time.perf_counter()
        train_on(sae, train, settings)
        ours.append((time.perf_counter() - t, reconstruction_stats(sae, held)["explained_variance"]))
        p = peer.ask("train_sae", folder=str(folder), steps=steps, batch=SAE_BATCH, d_sae=SAE_LATENTS, k=SAE_K,
                     lr=SAE_LR, decay=steps // 5, seed=0)
        theirs.append((p["seconds"], p["explained_variance"]))
    o_s, o_ev = min(ours)
    p_s, p_ev = min(theirs)
    n = steps * SAE_BATCH
    threads = torch.get_num_threads()
    record(f"peers: TopK SAE training, {SAE_LATENTS} latents, k={SAE_K}, {steps} steps x {SAE_BATCH}, "
           f"{threads} thread{'s' if threads != 1 else ''}", n / o_s, n / p_s, "acts/s", target=1.5,
           note=f"peer: SAELens {peer.hello['versions']['sae-lens']} SAETrainer, lr {SAE_LR} decayed over the last "
                f"{steps // 5} steps; {len(train):,} training activations ({corpus})")
    record(f"peers: TopK SAE explained variance on {held_n:,} held-out activations", o_ev, p_ev, "EV", target=1.0,
           note=f"ours {o_ev:.4f}, SAELens {p_ev:.4f} (the same formula, the same held-out activations)")
