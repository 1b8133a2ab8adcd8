"""The peers' side of bench.run's peer rows, run by the peers' environment's Python (bench/peers/.venv), never the app's.

    bench/peers/.venv/bin/python bench/peers/side.py THREADS

A small server: it reads one JSON command a line on stdin and answers one line, "ANSWER {json}", on stdout (anything
the libraries print goes to stderr), so that bench.run can time ours and the peer's in alternating rounds while each
side keeps its model loaded. Tensors come and go as safetensors files in the folder a command names. It imports
nothing of this repository: it runs against the pinned SAELens, circuit-tracer and TransformerLens alone.
"""
from __future__ import annotations

import json
import re
import statistics
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import torch
from safetensors.torch import load_file, save_file

STATE: dict = {}


def median_seconds(fn, reps: int) -> float:
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def peak_growth(fn) -> tuple[float, float | None]:
    """(seconds, how far this process's peak resident memory rose while fn ran, MiB): Linux's VmHWM, reset through
    /proc/self/clear_refs (None where it cannot be), as bench.run measures ours."""
    def status(key):
        return int(re.search(rf"{key}:\s+(\d+)", Path("/proc/self/status").read_text()).group(1)) / 1024
    try:
        Path("/proc/self/clear_refs").write_text("5")
        before = status("VmRSS")
    except OSError:
        before = None
    t = time.perf_counter()
    fn()
    took = time.perf_counter() - t
    return took, None if before is None else status("VmHWM") - before


def tree(flat: dict):
    """GPT-2's flat tensor names as the attribute tree TransformerLens's convert_gpt2_weights reads from a Hugging
    Face model (gpt2.transformer.h[l].attn.c_attn.weight): a numbered part indexes, any other is an attribute."""
    root: dict = {}
    for name, t in flat.items():
        *path, leaf = name.split(".")
        node = root
        for part in path:
            node = node.setdefault(part, {})
        node[leaf] = t

    def build(node):
        if not isinstance(node, dict):
            return node
        if all(k.isdigit() for k in node):
            return {int(k): build(v) for k, v in node.items()}
        return SimpleNamespace(**{k: build(v) for k, v in node.items()})
    return build(root)


def hooked(folder: Path, cls=None):
    """A HookedTransformer (or ``cls``, a subclass) with our model's weights: folder/tl_config.json (its
    HookedTransformerConfig) and folder/gpt2.safetensors (our weights as GPT-2's tensors, core.nn.hf.export_state),
    read by TransformerLens's own GPT-2 conversion, nothing folded."""
    from transformer_lens import HookedTransformer, HookedTransformerConfig
    from transformer_lens.pretrained.weight_conversions import convert_gpt2_weights

    cfg = HookedTransformerConfig(**json.loads((folder / "tl_config.json").read_text()))
    model = (cls or HookedTransformer)(cfg)
    model.load_and_process_state_dict(convert_gpt2_weights(tree(load_file(folder / "gpt2.safetensors")), cfg),
                                      fold_ln=False, center_writing_weights=False, center_unembed=False,
                                      fold_value_biases=False)
    return model.eval()


def load_cache(folder: Path) -> dict:
    """TransformerLens's run_with_cache on folder/tokens.json; its logits and every cached activation written to
    folder/peer_cache.safetensors, for bench.run to check against ours."""
    model = hooked(folder)
    tokens = torch.tensor([json.loads((folder / "tokens.json").read_text())])  # (1, n)
    with torch.no_grad():
        logits, cache = model.run_with_cache(tokens)
    save_file({"logits": logits.clone(), **{k: v.contiguous().clone() for k, v in cache.items()}},  # no shared storage
              folder / "peer_cache.safetensors")

    def run():
        with torch.no_grad():
            model.run_with_cache(tokens)
    STATE["cache"] = run
    return {"hooks": len(cache)}


class Pieces:
    """The little of a Hugging Face tokenizer circuit-tracer reads: decode (its graph's labels) and the special ids.
    Our character models have no BOS; the prompt's first id is declared special so that circuit-tracer prepends none
    and attributes the same tokens as ours (it leaves position 0's features out, as it does after a BOS)."""

    def __init__(self, pieces: list[str], first: int):
        self.pieces, self.all_special_ids, self.vocab_size = pieces, [first], len(pieces)
        self.bos_token_id = self.pad_token_id = self.eos_token_id = None
        self.padding_side = "right"

    def decode(self, ids) -> str:
        ids = ids.tolist() if isinstance(ids, torch.Tensor) else ids
        return "".join(self.pieces[i] for i in ([ids] if isinstance(ids, int) else ids))


def our_transcoder(folder: Path, layer: int, ln_w: torch.Tensor, ln_b: torch.Tensor):
    """core/features/README.md's recipe: circuit-tracer's SingleLayerTranscoder from one of our transcoder folders,
    with the block's second LayerNorm's weight and bias folded into its encoder. TransformerLens's
    ``ln2.hook_normalized`` (circuit-tracer's input hook) is the LayerNorm's output *before* its weight and bias
    (x̂); ours reads after them (x̂ * w + b). (x̂ * w + b) @ W_enc.T + b_enc = x̂ @ (W_enc * w).T + (b_enc + W_enc @ b):
    the same pre-activations from circuit-tracer's hook, and the same gradient through it."""
    from circuit_tracer.transcoder import SingleLayerTranscoder
    from circuit_tracer.transcoder.activation_functions import TopK

    cfg, w = json.loads((folder / "cfg.json").read_text()), load_file(folder / "sae_weights.safetensors")
    topk = TopK(cfg["k"])  # circuit-tracer's keeps the k largest as they are; ours takes their ReLU too
    tc = SingleLayerTranscoder(cfg["d_in"], cfg["d_sae"], lambda pre: torch.relu(topk(pre)), layer,
                               device=torch.device("cpu"), dtype=torch.float32)
    W_enc = w["W_enc"].T  # (d_sae, d_model): circuit-tracer's orientation, the transpose of ours
    tc.load_state_dict({**w, "W_enc": (W_enc * ln_w).contiguous(), "b_enc": w["b_enc"] + W_enc @ ln_b})
    return tc


def load_attribute(folder: Path, transcoders: str, n_layers: int, batch: int) -> dict:
    """circuit-tracer's ReplacementModel (TransformerLens backend) of our model with our transcoders, and its
    ``attribute`` on folder/tokens.json with the logit targets folder/targets.json (our graph's)."""
    from circuit_tracer import attribute
    from circuit_tracer.replacement_model.replacement_model_transformerlens import TransformerLensReplacementModel
    from circuit_tracer.transcoder import TranscoderSet

    gpt2 = load_file(folder / "gpt2.safetensors")
    ln2 = {l: (gpt2[f"transformer.h.{l}.ln_2.weight"], gpt2[f"transformer.h.{l}.ln_2.bias"]) for l in range(n_layers)}
    tcs = TranscoderSet({l: our_transcoder(Path(transcoders) / f"layer-{l}", l, *ln2[l]) for l in range(n_layers)},
                        feature_input_hook="ln2.hook_normalized", feature_output_hook="hook_mlp_out",
                        scan="transformer-explorer")
    # from_config's two steps with the weights loaded between them: the replacement wraps the MLPs, and their
    # weights' names change once it has
    model = hooked(folder, TransformerLensReplacementModel)
    model._configure_replacement_model(tcs)
    tokens = torch.tensor(json.loads((folder / "tokens.json").read_text()))
    model.tokenizer = Pieces(json.loads((folder / "pieces.json").read_text()), int(tokens[0]))
    targets = torch.tensor(json.loads((folder / "targets.json").read_text()))
    out = {}

    def run():
        g = attribute(tokens, model, attribution_targets=targets, batch_size=batch, verbose=False)
        out["graph"] = g
    run()  # warm up (and the graph, for the row's check against ours)
    g = out["graph"]
    F = g.active_features.shape[0]
    save_file({"features": g.active_features.contiguous(),  # (F, 3): layer, position, latent
               "logit_edges": g.adjacency_matrix[-len(g.logit_targets):, :F].float().contiguous()},  # (logits, F)
              folder / "peer_graph.safetensors")
    STATE["attribute"] = run
    return {"n_features": int(g.active_features.shape[0]), "n_logits": int(len(g.logit_targets)),
            "adjacency": list(g.adjacency_matrix.shape), "adjacency_dtype": str(g.adjacency_matrix.dtype)}


def time_attribute(reps: int) -> dict:
    runs = [peak_growth(STATE["attribute"]) for _ in range(reps)]
    return {"seconds": statistics.median(t for t, _ in runs),
            "peak_mib": None if runs[0][1] is None else max(m for _, m in runs)}


def train_sae(folder: Path, steps: int, batch: int, d_sae: int, k: int, lr: float, decay: int, seed: int) -> dict:
    """SAELens's TopK trainer (SAETrainer, TopKTrainingSAE, its own initialisation, AuxK and decoder handling) on
    folder/acts.safetensors's ``train``, ``steps`` batches of ``batch`` drawn as ours draws them (a fresh permutation
    every pass); its explained variance on ``held``, the formula of SAELens's evals (and of ours)."""
    from sae_lens import TopKTrainingSAE, TopKTrainingSAEConfig
    from sae_lens.config import SAETrainerConfig
    from sae_lens.training.sae_trainer import SAETrainer

    acts = load_file(folder / "acts.safetensors")
    train, held = acts["train"], acts["held"]
    torch.manual_seed(seed)
    sae = TopKTrainingSAE(TopKTrainingSAEConfig(d_in=train.shape[1], d_sae=d_sae, k=k, dtype="float32",
                                                device="cpu"))
    g = torch.Generator().manual_seed(seed)

    def batches():
        n = len(train)
        while True:
            order = torch.randperm(n, generator=g)
            for at in range(0, n - batch + 1, batch):
                yield train[order[at:at + batch]]  # (batch, d_in)
    cfg = SAETrainerConfig(total_training_samples=steps * batch, train_batch_size_samples=batch, lr=lr,
                           lr_end=lr / 10, lr_decay_steps=decay, device="cpu")  # lr_end: its runner's default
    trainer = SAETrainer(cfg, sae, batches())
    t = time.perf_counter()
    trainer.fit()
    took = time.perf_counter() - t
    with torch.no_grad():
        x_hat = sae.decode(sae.encode(held))
        err = (x_hat - held).pow(2).sum().item()
        var = (held - held.mean(0)).pow(2).sum().item()
    return {"seconds": took, "explained_variance": 1 - err / var, "steps": trainer.n_training_steps}


def serve(threads: int) -> None:
    torch.set_num_threads(threads)
    out = sys.stdout
    sys.stdout = sys.stderr  # the libraries' prints: never mixed with the answers
    import importlib.metadata as md
    versions = {p: md.version(p) for p in ("sae-lens", "circuit-tracer", "transformer-lens", "transformers", "torch")}
    print("ANSWER " + json.dumps({"ready": True, "versions": versions, "threads": torch.get_num_threads()}),
          file=out, flush=True)
    for line in sys.stdin:
        cmd = json.loads(line)
        do = cmd.pop("do")
        torch.set_num_threads(cmd.pop("threads", threads))
        try:
            if do == "load_cache":
                answer = load_cache(Path(cmd["folder"]))
            elif do == "time_cache":
                answer = {"seconds": median_seconds(STATE["cache"], cmd["reps"])}
            elif do == "load_attribute":
                answer = load_attribute(Path(cmd["folder"]), cmd["transcoders"], cmd["n_layers"], cmd["batch"])
            elif do == "time_attribute":
                answer = time_attribute(cmd["reps"])
            elif do == "train_sae":
                answer = train_sae(Path(cmd.pop("folder")), **cmd)
            else:
                answer = {"error": f"unknown command {do!r}"}
        except Exception as e:  # noqa: BLE001 - said to bench.run, which records it in the row
            import traceback
            traceback.print_exc()
            answer = {"error": f"{type(e).__name__}: {e}"}
        print("ANSWER " + json.dumps(answer), file=out, flush=True)


if __name__ == "__main__":
    serve(int(sys.argv[1]))
