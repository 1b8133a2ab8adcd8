"""What the training page's live view reads off a run's status (core.training.training_job.JobStatus): its state and
settings in words, its six numbers, the losses in bits per character, the loss curve over the uniform guess's
baseline, and the heads on the induction probe with the best of them. The page only lays these out."""
from __future__ import annotations

import math

from core.data.corpus import TRAIN_FRACTION
from core.figures.common import loss_curve
from core.serve.fmt import clock, head_label
from core.analysis.picks import best_of
from core.analysis.induction import PROBE_SEQS, THRESHOLD, formation_step
from core.figures.induction_figures import formation_figure
from core.training.recipes import RECIPE_TITLES

# while a run moves, the live view alone reruns this often (every second cost a quarter of the training speed
# when the browser shares the two cores); the training process never waits for the page
LIVE_POLL_S = 2.0

STATE_LABELS = {"queued": "Waiting for the server's cores", "preparing": "Preparing the data and the model ...",
                "running": "Training",
                "pausing": "Pausing after this step", "paused": "Paused",
                "stopping": "Stopping: finishing the step and a last evaluation", "stopped": "Stopped",
                "finished": "Finished", "failed": "Failed"}


def unit_word(units: str) -> str:
    """The singular of a run's units: 'characters' -> 'character', 'tokens' -> 'token'."""
    return "character" if units == "characters" else "token"


def run_summary(corpus_name: str, cfg, vocab_size: int | None, threads: int, precision: str = "") -> str:
    """One line naming a run's corpus, tokens, shape and recipe (``cfg``: its JobSettings; ``vocab_size``: the
    learned BPE's, 0 or None before the run has learned it, when the size asked for is shown) and, once the run
    has chosen it, ``precision``: its matrix products' (core.nn.precision)."""
    # vocab_size is 0 until the run has learned its BPE, which may end smaller than asked (few pairs to merge)
    tokens = "characters" if cfg.tokenizer == "char" else f"byte-level BPE of {vocab_size or cfg.bpe_vocab:,} tokens"
    return (f"This run: {corpus_name} · {tokens} · d={cfg.d_model} · h={cfg.n_heads} · L={cfg.n_layers} · "
            f"n_ctx={cfg.n_ctx} · batch {cfg.batch_size} · {RECIPE_TITLES[cfg.recipe]}, AdamW lr {cfg.lr:g} · "
            f"seed {cfg.seed} · {threads} CPU thread{'s' if threads != 1 else ''}" + precision_words(precision))


def precision_words(precision: str) -> str:
    """" · <precision> products" for a run summary: bf16 said with why (a probe measured it faster here, attention
    kept fp32); "" when unknown (a run not yet started, a model saved before runs recorded it)."""
    if precision == "bfloat16":
        return " · bfloat16 matrix products (attention float32), measured faster on this CPU at this shape"
    return f" · {precision} matrix products" if precision else ""


def bits_per_char(nats_per_token: float, chars_per_token: float) -> float:
    """A loss in nats per token as bits per character, the unit in which models of any tokenizer compare:
    ln 2 nats make a bit, and each token covers ``chars_per_token`` characters."""
    return nats_per_token / math.log(2) / chars_per_token


def uniform_loss(vocab_size: int) -> float | None:
    """ln m, the loss of guessing uniformly among the m tokens; None for a one-token vocabulary (a loss of 0
    is no baseline to show)."""
    return math.log(vocab_size) if vocab_size > 1 else None


def best_head(heads: list[dict]) -> tuple[int, dict]:
    """(the last step measured, the row of the head with the highest induction score at that step) from a
    run's head measurements (one row per step, layer and head); the first such head wins a tie."""
    last = max(r["step"] for r in heads)  # the rows of every measurement so far, oldest first
    final = [r for r in heads if r["step"] == last]
    return last, best_of(final, lambda r: r["induction"]) or final[0]  # NaN skipped; all NaN: the first, shown as nan


def val_bits(s) -> float | None:
    """The last evaluation's validation loss in bits per character (``s``: a run's JobStatus); None for a character
    model, whose nats per character need no converting, and before the first evaluation."""
    if not s.evals or unit_word(s.units) != "token":  # a character model's loss is per character already
        return None
    return bits_per_char(s.evals[-1]["val_loss"], s.val_chars_per_token)


def live_metrics(s) -> list[tuple[str, str, str | None]]:
    """(label, value, help) of the live view's six numbers for a run's JobStatus ``s``."""
    last = s.evals[-1] if s.evals else {}  # before the first evaluation the losses are dashes
    per, bits = unit_word(s.units), val_bits(s)
    in_bits = (f" About {bits:.3f} bits per character: nats per token ÷ ln 2 ÷ {s.val_chars_per_token:.2f} "
               "characters per token, the number to compare with a character model." if bits is not None else "")
    return [("Step", f"{s.step:,}", None),
            ("Training loss", f"{last['train_loss']:.3f}" if last else "–",
             f"Nats per {per}, estimated on a fixed set of training windows at the last evaluation."),
            ("Validation loss", f"{last['val_loss']:.3f}" if last else "–",
             f"The same, on the held-out last {1 - TRAIN_FRACTION:.0%} of the corpus.{in_bits}"),
            ("Tokens/s", f"{s.tokens_per_s:,.0f}" if s.tokens_per_s else "–", None),
            ("Elapsed", clock(s.elapsed_s), "Time spent training; pauses do not count."),
            ("Time left", clock(s.eta_s) if s.active else "–", None)]


def bits_caption(s) -> str | None:
    """The live view's note on a BPE run's losses in bits per character; None for a character model."""
    bits = val_bits(s)
    if bits is None:
        return None
    return (f"Losses in nats per token. At the last evaluation the validation loss is about {bits:.3f} bits per "
            f"character (÷ ln 2 ÷ {s.val_chars_per_token:.2f} characters per token), the number to compare with a "
            "character model; the saved model's card gives it measured over the whole held-out part.")


def live_figures(s):
    """(loss curve, heads figure or None before the first head measurement, the step an induction head formed
    or None) of a run's JobStatus: the curve has the uniform guess's ln m as its baseline and a mark where the
    head formed."""
    formed = formation_step(s.heads) if s.heads else None  # the first step any head reached THRESHOLD
    curve = loss_curve(s.evals, title="Loss while training", step_losses=s.step_losses, total_steps=s.total_steps,
                       baseline=uniform_loss(s.vocab_size), marks={formed: "induction head"} if formed is not None
                       else None, unit=unit_word(s.units))
    heads = formation_figure(s.heads, total_steps=s.total_steps, units=s.units) if s.heads else None
    return curve, heads, formed


def heads_caption(s, heads_interval: int, formed: int | None) -> str:
    """What the heads figure shows, and where the heads stand at the last measurement: the best one, the probe's
    loss on each copy, and whether (at step ``formed``: core.analysis.induction.formation_step) an induction head has
    crossed THRESHOLD. ``s``: a run's JobStatus with head measurements."""
    per = unit_word(s.units)
    step, best = best_head(s.heads)
    return (f"Right: every {heads_interval} steps each head is run on a fixed probe, {PROBE_SEQS} strings of distinct "
            f"random {s.units} written twice. Induction score: the mean weight a {per} in the second copy puts on the "
            f"{per} that followed its first occurrence; previous-token score: the weight on the {per} just before. "
            f"At step {step:,} the best head is {head_label(best['layer'], best['head'])} ({best['induction']:.2f}); "
            f"on the probe the model's loss is {best['first_copy_loss']:.2f} nats on the first copy and "
            f"{best['second_copy_loss']:.2f} on the second. "
            + (f"An induction head crossed {THRESHOLD:.2f} at step {formed:,}, marked on the loss curve."
               if formed is not None else f"No head has reached {THRESHOLD:.2f} yet."))
