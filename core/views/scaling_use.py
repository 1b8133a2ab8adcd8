"""The rules behind two sections of the Scaling laws page (pages/scaling.py): the unique-data control (a budget spent
on a limited stock of text, Muennighoff et al. 2023) and inference-aware sizing (Sardana et al. 2024). Numbers and
sentences; no Streamlit here."""
from __future__ import annotations

from dataclasses import dataclass

from core.analysis.scaling import FAMOUS_MODELS, R_STAR_D, R_STAR_N, ScalingLaw, effective_data
from core.analysis.scaling_inference import DEFAULT_INFERENCE_TOKENS, famous_inference_table, inference_optimal
from core.analysis.scaling_repeat import MUENNIGHOFF_2023, WORKED_EXAMPLE, epoch_worth, repeated_loss, repeated_optimum
from core.figures.forecast_figures import MAX_PASSES
from core.serve.fmt import human, pretty_sci

# Estimates of the unique text there was to draw on, in tokens
STOCKS = {
    # Penedo et al. 2023, "The RefinedWeb Dataset for Falcon LLM", arXiv:2306.01116: five trillion tokens of
    # filtered, deduplicated web text from CommonCrawl
    "RefinedWeb (2023)": 5e12,
    # Penedo et al. 2024, "The FineWeb Datasets", arXiv:2406.17557: 15 trillion tokens from 96 CommonCrawl snapshots
    "FineWeb (2024)": 15e12,
    # Villalobos et al. 2024, "Will we run out of data?", arXiv:2211.04325 (v2): the effective stock of public
    # human-generated text, about 300 trillion tokens
    "all public human text (Villalobos et al. 2024)": 300e12,
}
UNIQUE_CHOICES = [1e9, 3e9, 1e10, 3e10, 1e11, 3e11, 1e12, 3e12, 5e12, 1e13, 1.5e13, 3e13, 1e14, 3e14]
COMPUTE_CHOICES = [1e20, 3e20, 1e21, 3e21, 1e22, 3e22, 1e23, 3e23, 1e24, 3e24, 1e25, 3e25, 1e26]
INFERENCE_CHOICES = [0.0, 1e10, 1e11, 1e12, DEFAULT_INFERENCE_TOKENS, 1e13, 3e13, 1e14]


@dataclass(frozen=True)
class Constrained:
    """A budget C spent with and without a limit of U unique tokens."""
    C: float
    U: float
    N_plain: float          # the plain law's optimum, as if fresh text never ran out
    D_plain: float
    loss_plain_fresh: float  # what the plain law promises for it (fresh text)
    loss_plain_repeated: float  # what that split really gets when D > U must repeat the stock
    N: float                # the data-constrained optimum, L(N', D')
    D: float
    loss: float

    @property
    def passes_plain(self) -> float:
        return self.D_plain / self.U

    @property
    def passes(self) -> float:
        return self.D / self.U


def constrained(law: ScalingLaw, C: float, U: float) -> Constrained:
    n0, d0 = (float(v) for v in law.compute_optimal(C))
    n, d = repeated_optimum(law, C, U)
    return Constrained(C=C, U=U, N_plain=n0, D_plain=d0, loss_plain_fresh=float(law.loss(n0, d0)),
                       loss_plain_repeated=float(repeated_loss(law, n0, d0, U)), N=n, D=d,
                       loss=float(repeated_loss(law, n, d, U)))


def constrained_note(c: Constrained) -> str:
    if c.passes_plain <= 1.0:
        return (f"With {human(c.U)} unique tokens this budget never runs out of fresh text: Chinchilla's split reads "
                f"{pretty_sci(c.passes_plain)} of the stock, and the limit changes nothing.")
    off = (f" That is past the right end of the chart below, which stops at {pretty_sci(MAX_PASSES)} passes: so many "
           "repetitions are worth almost nothing more than the first few." if c.passes > MAX_PASSES else "")
    return (f"Chinchilla's split would read the stock {pretty_sci(c.passes_plain)} times: the plain law promises "
            f"{c.loss_plain_fresh:.4f} as if every token were fresh, but repeated text gets it only "
            f"{c.loss_plain_repeated:.4f}. Spent for the stock, the same compute goes to {human(c.N)} parameters "
            f"({pretty_sci(c.N / c.N_plain)}× Chinchilla's) on {pretty_sci(c.passes)} passes, for {c.loss:.4f}." + off)


def target_default(law: ScalingLaw) -> float:
    """The inference section's default target: the loss the law gives Chinchilla itself (70B on 1.4T)."""
    chin = next(m for m in FAMOUS_MODELS if m.name == "Chinchilla")
    return round(float(law.loss(chin.N, chin.D)), 3)


def sizing(law: ScalingLaw, target: float, inference_tokens: float) -> tuple[dict, dict]:
    """(Chinchilla's model for ``target``: least training FLOPs, the inference-aware one: least lifetime FLOPs)."""
    return inference_optimal(law, target, 0.0), inference_optimal(law, target, inference_tokens)


def sizing_note(chin: dict, best: dict, inference_tokens: float) -> str:
    chin_total = chin["train_flops"] + 2 * chin["N"] * inference_tokens
    saved = 1 - best["total_flops"] / chin_total
    return (f"Serving {human(inference_tokens)} tokens, the model of least lifetime cost has {human(best['N'])} "
            f"parameters ({best['N'] / chin['N']:.2f}× Chinchilla's {human(chin['N'])}), trained on "
            f"{pretty_sci(round(best['tokens_per_param']))} tokens per parameter instead of "
            f"{pretty_sci(round(chin['tokens_per_param']))}. It costs "
            f"{best['train_flops'] / chin['train_flops']:.2f}× the training and saves {saved:.1%} of the lifetime "
            "FLOPs.")


def famous_rows(law: ScalingLaw, inference_tokens: float) -> list[dict]:
    """The famous models judged again with a serving volume: the rows as the page's table shows them."""
    return [{"model": r["model"], "N": human(r["N"]), "D/N": r["tokens_per_param"], "predicted loss": r["loss"],
             "Chinchilla's N": human(r["chinchilla_N"]), "inference-aware N": human(r["best_N"]),
             "its D/N": r["best_tokens_per_param"], "lifetime cost / least": r["own_over_best"]}
            for r in famous_inference_table(law, inference_tokens)]


def worth_caption() -> str:
    """What four and sixteen passes are worth, computed (Muennighoff et al.'s R*)."""
    w4, w16 = float(epoch_worth(4)), float(epoch_worth(16))
    a4, a16 = effective_data(1.0, 4.0) / 4, effective_data(1.0, 16.0) / 16
    return (f"Left: the model above on more and more passes over the stock; the plain law (dashed) counts every pass "
            f"as fresh text. Right: what a token of each pass is worth against a fresh one: {w4:.2f} on the fourth "
            f"pass, {w16:.2f} on the sixteenth. Averaged over all passes, four give {a4:.2f} of fresh text and "
            f"sixteen {a16:.2f}.")


def split_caption() -> str:
    """Why the limited split has fewer parameters and more passes, with Muennighoff et al.'s worked example computed
    from their own law."""
    W = WORKED_EXAMPLE
    C = 6 * W["N"] * W["D"]
    n0, _ = MUENNIGHOFF_2023.compute_optimal(C)
    n, d = repeated_optimum(MUENNIGHOFF_2023, C, W["unique"])
    return ("With the stock fixed, a growing budget goes to fewer parameters and more passes than the plain law says: "
            f"parameters beyond what the unique text can use lose their worth faster (R*_N ≈ {R_STAR_N}) than "
            f"repeated tokens do (R*_D ≈ {R_STAR_D}). Their own example, computed with their fitted law: "
            f"{human(W['unique'])} unique tokens move the best model for its budget from {human(n0)} parameters to "
            f"{human(n)} on {d / W['unique']:.1f} passes. The R* are theirs, fitted with their own constants and "
            "applied here to the law above.")


def stock_caption() -> str:
    """The stocks in words, and how close the largest famous run comes to them."""
    big = max(FAMOUS_MODELS, key=lambda m: m.D)
    web = STOCKS["FineWeb (2024)"]
    return ("; ".join(f"{k}: {human(v)} tokens" for k, v in STOCKS.items()) + f". {big.name}'s {human(big.D)} "
            f"training tokens are {big.D / web:.1f} FineWebs: the largest runs are near the point where fresh public "
            "text runs out, which is why repetition matters beyond toy corpora. The Your scaling law page measures "
            "it on Tiny Shakespeare.")
