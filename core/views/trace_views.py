"""What the Inside the model page reads out of one ``core.analysis.trace.Trace`` at one position: the prediction, the
rows of a stream step, one head's query, keys and values, the MLP's hidden units. Numpy out, float64 where the
page does arithmetic on it; the model and the trace are only read.

Layers and heads count from 0; ``b`` is the batch row (the page traces one sequence, b = 0).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from core.nn.model import silent_units
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
        rows = [_np(model.tok_emb.weight[ids[pos]]), _np(model.pos_emb.weight[pos]), step.after]
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
