"""Steering on the Generation page, measured two ways on the shipped character model and its shipped SAE, with the
page's default feature (core.features.steering.default_feature), prompt and decoding (200 new characters sampled at
T = 1, so the window slides past n_ctx for most steps):

- its cost: plain and steered texts drawn interleaved in one run. Target: steering adds at most 10%.
- what alpha does to the text (issue 55): for alpha from 0 to 1 on the slider's grid, the same texts over many seeds,
  each scored by its sense (the share of its character 3-grams that occur in Tiny Shakespeare, the training text)
  and by the feature's mark (the share of its letters that are capitals: the default feature stands for a line
  break, and steering with it writes speakers' names). The page's default alpha (core.features.steering.
  DEFAULT_ALPHA) is the largest alpha whose typical (median) steered text stays within the plain texts' range, taken
  as all but their least sensible tenth (one plain text in 32 can be poor: it would set the whole range), while the
  mean capital share is above the plain texts' mean by more than two standard errors.

    python -m bench.run --only steering [--quick]
    python -m bench.steering            # both, and the alpha table into bench/results/steering.md
    python -m bench.steering --sweep    # the alpha table alone (into bench/results/steering.md)
"""
from __future__ import annotations

import math
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MODEL = ROOT / "assets" / "models" / "shakespeare-char"
SITE = "blocks.0.hook_resid_post"
PROMPT = "QUEEN:\nWhat news from the north, good cousin?\n\nGLOUCESTER:\nThe"
N_NEW = 200
TARGET = 1 / 1.10  # plain / steered: steered at most 10% slower
ALPHAS = tuple(round(0.1 * k, 1) for k in range(11))  # 0 to 1 on the slider's step
SEEDS = 32
RESULT = ROOT / "bench" / "results" / "steering.md"


def trigrams(text: str) -> list[str]:
    return [text[i:i + 3] for i in range(len(text) - 2)]


def sense(text: str, corpus_grams: set) -> float:
    """The share of ``text``'s character 3-grams that occur in the corpus (1: every one does)."""
    grams = trigrams(text)
    return sum(g in corpus_grams for g in grams) / len(grams) if grams else float("nan")


def capitals(text: str) -> float:
    """The share of ``text``'s letters that are capitals."""
    letters = [c for c in text if c.isalpha()]
    return sum(c.isupper() for c in letters) / len(letters) if letters else 0.0


def setup():
    """(model, tokenizer, prompt ids, sae, default feature, its typical size), as the page picks them."""
    from core.data.held_out import model_held_out
    from core.analysis.sae import load_sae, sae_folder
    from core.features.steering import default_feature, feature_scales
    from core.nn.checkpoint import load_checkpoint, read_config

    model, tok = load_checkpoint(MODEL)
    folder = sae_folder(MODEL, SITE)
    if not folder.is_dir():
        raise SystemExit(f"{folder} is missing: the shipped SAE is needed (python -m core.features trains one)")
    sae = load_sae(folder)
    held = model_held_out(model, tok, read_config(MODEL)[2], max_tokens=64 * model.config.n_ctx)  # as pages.generation.parts
    scales = feature_scales(model, sae, held.windows)
    feature = default_feature(scales, tok.pieces)
    return model, tok, tok.encode(PROMPT), sae, feature, scales.scale(feature)


def texts(quick: bool = False, parts=None) -> dict:
    """{"plain": s, "steered": s}: median seconds of one text of each kind, in alternating rounds."""
    from bench.run import cpu_times, interleaved
    from core.analysis import generation as G
    from core.features.steering import DEFAULT_ALPHA, feature_hooks

    model, tok, ids, sae, feature, s_i = parts or setup()
    hooks = feature_hooks(sae, feature, DEFAULT_ALPHA, s_i)  # the page's default feature and alpha
    plain = lambda: G.draw(model, ids, N_NEW, 1.0, seed=0, chars=tok.pieces)  # noqa: E731
    steered = lambda: G.draw(model, ids, N_NEW, 1.0, seed=0, chars=tok.pieces, hooks=hooks)  # noqa: E731
    rounds, reps = (4, 2) if quick else (16, 2)  # many short rounds: this machine's load drifts within seconds
    t = interleaved({"plain": plain, "steered": steered}, rounds, reps)
    cpu = cpu_times({"plain": plain, "steered": steered}, rounds // 2)  # beside it: the load disturbs it less
    return {**t, "cpu_plain": cpu["plain"], "cpu_steered": cpu["steered"]}


def tenth(values) -> float:
    """The 10th percentile of ``values`` (statistics' "inclusive" quantiles: the lowest tenth lies below it)."""
    return statistics.quantiles(values, n=10, method="inclusive")[0]


def sweep(parts=None, seeds: int = SEEDS, alphas=ALPHAS) -> list[dict]:
    """Per alpha: the sense and capital share of the texts of seeds 0 .. seeds - 1 (each seed's, and their mean,
    median, lowest, 10th percentile and highest)."""
    from core.analysis import generation as G
    from core.features.steering import feature_hooks
    from core.data.corpus import shakespeare_path

    path = shakespeare_path()
    if path is None:
        raise SystemExit("Tiny Shakespeare is not found (TE_CORPUS, ../shared/data): the sense is measured on it")
    corpus_grams = set(trigrams(path.read_text(encoding="utf-8")))
    model, tok, ids, sae, feature, s_i = parts or setup()
    rows = []
    for alpha in alphas:
        hooks = feature_hooks(sae, feature, alpha, s_i)
        out = [tok.decode([s["id"] for s in G.draw(model, ids, N_NEW, 1.0, seed=seed, chars=tok.pieces,
                                                   hooks=hooks)[0]]) for seed in range(seeds)]
        sn, cap = [sense(t, corpus_grams) for t in out], [capitals(t) for t in out]
        rows.append({"alpha": alpha, "sense": statistics.mean(sn), "sense_median": statistics.median(sn),
                     "sense_lo": min(sn), "sense_p10": tenth(sn), "sense_hi": max(sn), "senses": sn,
                     "capitals": statistics.mean(cap), "capitals_se": statistics.stdev(cap) / math.sqrt(seeds),
                     "text": out[0]})
    return rows


def choose(rows: list[dict]) -> float | None:
    """The largest alpha whose median sense is at least the plain texts' 10th percentile and whose capital share is
    above the plain mean by more than two standard errors; None when no alpha is both."""
    plain = next(r for r in rows if r["alpha"] == 0)
    fits = [r["alpha"] for r in rows if r["alpha"] > 0 and r["sense_median"] >= plain["sense_p10"]
            and r["capitals"] > plain["capitals"] + 2 * plain["capitals_se"]]
    return max(fits) if fits else None


def table(rows: list[dict], feature: int, seeds: int) -> str:
    from core.features.steering import DEFAULT_ALPHA

    chosen = choose(rows)
    lines = ["# Steering: alpha against sense (issue 55)", "",
             f"`python -m bench.steering`: the shipped character model, its SAE at `{SITE}`, the page's default "
             f"feature {feature}, the Generation page's prompt, {N_NEW} new characters at T = 1, seeds 0 to "
             f"{seeds - 1}. Sense: the share of a text's character 3-grams found in Tiny Shakespeare. Capitals: the "
             "share of its letters that are capitals (the feature's mark: speakers' names).", "",
             "| α | sense: median | mean | lowest, 10th percentile, highest | capitals: mean ± SE | seed 0's text, "
             "first 60 characters |", "|---|---|---|---|---|---|"]
    for r in rows:
        start = r["text"][:60].replace("\n", "⏎").replace("|", "\\|")
        lines.append(f"| {r['alpha']:g} | {r['sense_median']:.3f} | {r['sense']:.3f} | {r['sense_lo']:.3f}, "
                     f"{r['sense_p10']:.3f}, {r['sense_hi']:.3f} | {r['capitals']:.3f} ± {r['capitals_se']:.3f} | "
                     f"`{start}` |")
    lines += ["", f"Chosen: α = {chosen}, the largest whose median sense is at least the plain texts' 10th percentile "
                  "(their range, but for the least sensible tenth), with the capital share more than two standard "
                  f"errors above the plain mean. core.features.steering.DEFAULT_ALPHA = {DEFAULT_ALPHA:g}."]
    return "\n".join(lines) + "\n"


def main(quick: bool = False, write: bool = False) -> list[dict]:
    from bench.run import record
    from core.features.steering import DEFAULT_ALPHA

    parts = setup()
    t = texts(quick, parts)
    row = record(f"steering adds ≤ 10% to a generation ({N_NEW} chars)", t["steered"], t["plain"], "s",
                 target=round(TARGET, 3), higher_is_better=False,
                 note=f"(plain {t['plain'] * 1e3:.0f} ms, steered {t['steered'] * 1e3:.0f} ms: "
                      f"{(t['steered'] / t['plain'] - 1) * 100:+.1f}%; thread CPU time, least of rounds: "
                      f"{(t['cpu_steered'] / t['cpu_plain'] - 1) * 100:+.1f}%)")
    seeds = 8 if quick else SEEDS
    rows = sweep(parts, seeds)
    text = table(rows, parts[4], seeds)
    print(text)
    if write:
        RESULT.write_text(text, encoding="utf-8")
    chosen = choose(rows)
    sense_row = record("steering's default α at most the measured one", DEFAULT_ALPHA, chosen or 0.0, "α",
                       target=1.0, higher_is_better=False,
                       note=f"(the measured choice: α = {chosen}; the page's default {DEFAULT_ALPHA:g})")
    return [row, sense_row]


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    if "--sweep" in sys.argv:  # the alpha table alone: the timing rounds take minutes on a busy machine
        found = setup()
        text = table(sweep(found), found[4], SEEDS)
        print(text)
        RESULT.write_text(text, encoding="utf-8")
    else:
        main("--quick" in sys.argv, write="--quick" not in sys.argv)
