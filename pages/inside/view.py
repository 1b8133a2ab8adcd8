"""What the Inside the model page reads out of one ``core.analysis.trace.Trace`` at one position: the prediction, the
rows of a stream step, one head's query, keys and values, the MLP's hidden units. Numpy out, float64 where the
page does arithmetic on it; the model and the trace are only read.

Layers and heads count from 0; ``b`` is the batch row (the page traces one sequence, b = 0).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from core.serve.fmt import shown_pos

from core.nn.config import silent_units
from core.analysis.sampling import temperature_softmax
from core.analysis.trace import StreamStep, Trace


def _np(t) -> np.ndarray:
    return t.detach().double().cpu().numpy()


def _norm(t) -> float:
    """The length of a float32 vector, computed in float32 as the page always has."""
    return float(np.linalg.norm(t.detach().cpu().numpy()))


@dataclass
class Prediction:
    """The model's output at one position."""
    logits: np.ndarray  # (m,) float64
    probs: np.ndarray   # (m,) the softmax at T = 1
    predicted: int      # the most likely next token

    @property
    def order(self) -> np.ndarray:
        """Token ids, most likely first."""
        return np.argsort(-self.probs)


def prediction(tr: Trace, pos: int, b: int = 0) -> Prediction:
    logits = tr.logits[b, pos].double()  # (m,)
    probs = temperature_softmax(logits, 1.0).numpy()
    return Prediction(logits=logits.numpy(), probs=probs, predicted=int(probs.argmax()))


def step_rows(model, tr: Trace, steps: list[StreamStep], i: int, ids, pos: int, b: int = 0) -> np.ndarray:
    """(rows, d) the vectors step ``i`` of ``stream_steps`` is taken apart into, top to bottom:
    embedding: the token's vector, the position's vector, their sum (the stream's start);
    attention: the stream before, each head's share (after W_O), what the sublayer adds, the stream after;
    MLP: the stream before, what it adds, the stream after."""
    step = steps[i]
    before = steps[i - 1].after if i else np.zeros_like(step.after)
    if step.kind == "embed":  # the embedding tables are read, never changed
        position = _np(model.pos_emb.weight[pos]) if model.pos_emb is not None else np.zeros_like(step.after)
        rows = [_np(model.tok_emb.weight[ids[pos]]), position, step.after]  # no position table: a row of zeros
    elif step.kind == "attn":
        heads = _np(tr.head_out[step.layer][b, :, pos])  # (h, d)
        rows = [before, *heads, step.added, step.after]
    else:
        rows = [before, step.added, step.after]
    return np.stack(rows)  # k x (d,) -> (k, d)


@dataclass
class HeadAt:
    """One head at query position ``pos``, over the keys it may see (0..pos)."""
    q: np.ndarray        # (d_h,) the query
    keys: np.ndarray     # (pos+1, d_h)
    values: np.ndarray   # (pos+1, d_h)
    scores: np.ndarray   # (pos+1,) q.k / sqrt(d_h), before the softmax
    weights: np.ndarray  # (pos+1,) after the softmax
    out_norm: float      # the length of the head's output at pos after W_O (its share of the stream)

    @property
    def heaviest(self) -> int:
        return int(self.weights.argmax())

    def dot(self, key: int) -> float:
        """q . k of one key, before the 1/sqrt(d_h) scale."""
        return float(self.q @ self.keys[key])


def head_at(tr: Trace, layer: int, head: int, pos: int, b: int = 0) -> HeadAt:
    seen = slice(0, pos + 1)  # keys j <= pos: the causal mask hides the rest
    return HeadAt(q=_np(tr.q[layer][b, head, pos]), keys=_np(tr.k[layer][b, head, seen]),
                  values=_np(tr.v[layer][b, head, seen]), scores=_np(tr.scores[layer][b, head, pos, seen]),
                  weights=_np(tr.pattern[layer][b, head, pos, seen]),
                  out_norm=_norm(tr.head_out[layer][b, head, pos]))


@dataclass
class MlpAt:
    """One block's MLP at one position."""
    hidden: np.ndarray  # (d_ff,) the hidden units after the nonlinearity
    out: np.ndarray     # (d,) what the MLP adds to the stream
    silent: int         # hidden units the nonlinearity silenced (core.nn.model.silent_units)
    out_norm: float     # the length of ``out``


def mlp_at(tr: Trace, layer: int, pos: int, activation: str, b: int = 0) -> MlpAt:
    hidden = _np(tr.mlp_hidden[layer][b, pos])
    return MlpAt(hidden=hidden, out=_np(tr.mlp_out[layer][b, pos]), silent=silent_units(hidden, activation),
                 out_norm=_norm(tr.mlp_out[layer][b, pos]))


def window_start(pos: int, n: int, window: int) -> int:
    """The first of ``window`` positions shown out of n, so that the window ends at ``pos`` where it can: never
    before 0, never past the last position."""
    return min(max(0, pos - window + 1), n - window)


@dataclass(frozen=True)
class BlockNotes:
    """What a variant's block does differently, one sentence per section of the Inside page (None: as the lecture's
    block). ``update``: its stream update in LaTeX."""
    update: str
    stream: str | None = None
    attention: str | None = None
    mlp: str | None = None
    lens: str | None = None


def block_notes(config) -> BlockNotes:
    """The Inside page's words for a variant's block: where its numbers mean something other than the lecture's."""
    ln = {"pre": r"\operatorname{LN}", "post": "", "none": ""}[config.norm]
    read = (lambda f: rf"{f}({ln}(x))") if config.norm == "pre" else (lambda f: rf"{f}(x)")
    add = (lambda u: rf"x \leftarrow \operatorname{{LN}}(x + {u})" if config.norm == "post" else
           rf"x \leftarrow x + {u}") if config.residual else (lambda u: rf"x \leftarrow {u}")
    update = add(read(r"\operatorname{attn}")) + (r", \qquad " + add(read(r"\operatorname{MLP}")) if config.mlp else "")
    stream = []
    if config.norm == "post":
        stream.append("this block puts its LayerNorm after each sum, so the stream after a step is the normalised sum, "
                      "not the stream before plus what the step adds")
    if not config.residual:
        stream.append("this block has no residual connection: the stream after a step is what the step wrote, alone")
    if not config.positions:
        stream.append("this model has no position table: the embedding is the token's vector alone (the position row "
                      "is zero)")
    attention = {"after_softmax": "this model masks after the softmax: the weights of the keys it may see sum to less "
                                  "than 1, and the softmax still spread weight over the future",
                 "none": "this model has no causal mask: its queries also read later keys, which the view below leaves "
                         "out"}.get(config.mask)
    if not config.w_o:
        attention = ((attention + "; ") if attention else "") + ("this model has no W_O: each head's output is added "
                                                                 "to its own d/h coordinates of the stream as it is")
    return BlockNotes(
        update=update,
        stream=(_sentence("; ".join(stream))) if stream else None,
        attention=_sentence(attention) if attention else None,
        mlp=None if config.mlp else "This model has no MLP: its blocks are attention alone, so there are no hidden "
                                    "units to look at.",
        lens=None if config.norm == "pre" else "This model has no final LayerNorm: its readout is the output map on "
                                               "the stream as it is, and so is each stage's lens.")


def _sentence(text: str) -> str:
    return text[0].upper() + text[1:] + "."


def gap_words(att) -> str:
    """A sentence for a split that is not exact (a post-norm or residual-free block): by how much the parts miss."""
    total = float(att.values.sum()) + att.constant
    return (f" This block is not a plain sum of its writers (its LayerNorms or a missing residual mix them), so the "
            f"split is approximate: the bars add up to {total:.3f} against the real logit {att.logit:.3f} "
            f"(off by {abs(att.gap):.3f}).")


def lens_caption(lo: int, hi: int, pos: int, unit: str, stage_names, accuracy) -> str:
    """The lens table's caption: which positions it shows, and (``accuracy``: lens_accuracy, None for one position)
    how often each stage's favourite is the token that really comes next."""
    where = f"Columns are positions {shown_pos(lo)} to {hi}, each headed by the {unit} read there; the red frame is " \
            f"position {shown_pos(pos)}."
    if accuracy is None:
        return where
    return where + f" Over the whole prompt, the favourite is the {unit} that really comes next " + ", ".join(
        f"{name} at {share:.0%} of positions" for name, share in zip(stage_names, accuracy)) + "."
