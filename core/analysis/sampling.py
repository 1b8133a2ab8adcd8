"""Turning logits into text: temperature, top-k and top-p filters, and the generation loop.

The loop is written once, as ``stream`` (an iterator that yields every new token with its probability
and the top alternatives), and ``generate`` just runs it to the end. Decoding is incremental: the model's
key/value cache holds the keys and values of every token already read, so each step feeds one token.
The model has learned absolute positions, so once the sequence outgrows n_ctx the window slides and
every position changes: the cache is rebuilt from the window, and the output is exactly that of the
plain loop ``model(idx[:, -n_ctx:])`` (a test checks it).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterator

import numpy as np
import torch

from core.nn.hooks import HookRun


# The temperatures the softmax can divide float32 logits by (the decoder's logits are float32). Below the smallest
# normal float32, 1.2e-38, T loses digits, and below 1.4e-45 it rounds to 0, where (z - max z) / T is 0/0 = NaN at
# the max: a T from a box or a link (a Python float, down to 1e-308) never reaches the division that small. Nothing
# is lost by stopping there: already at T = 1.2e-38 every gap to the max wider than about 1e-36 (two float32 logits
# that differ at all, unless both are within 1e-36 of 0) is divided to below -88, whose exp is exactly 0, so p(T) is
# the T = 0 limit itself. So a T under MIN_TEMPERATURE is T = 0, greedy. Above the largest float32, 3.4e38, T would
# round to inf, and a logit of -inf (a filtered token) would give -inf / inf = NaN: such a T is T = inf.
MIN_TEMPERATURE = float(torch.finfo(torch.float32).tiny)  # 1.1754944e-38
MAX_TEMPERATURE = float(torch.finfo(torch.float32).max)   # 3.4028235e38


def _check_temperature(temperature) -> float:
    """``temperature`` as the softmax uses it: a float >= 0, 0 below MIN_TEMPERATURE and inf above MAX_TEMPERATURE
    (see above); ValueError for NaN or a negative value."""
    t = float(temperature)
    if math.isnan(t) or t < 0:
        raise ValueError(f"temperature must be a number >= 0, got {temperature!r}")
    if t < MIN_TEMPERATURE:
        return 0.0
    if t > MAX_TEMPERATURE:
        return math.inf
    return t


def effective_temperature(temperature) -> float:
    """The temperature the decoding actually uses for ``temperature`` (>= 0): 0 below MIN_TEMPERATURE (greedy),
    inf above MAX_TEMPERATURE, else itself. A page says so in words when the two differ."""
    return _check_temperature(temperature)


def temperature_note(temperature) -> str:
    """In words, what a temperature outside the softmax's range is used as (``effective_temperature``)."""
    t = float(temperature)
    if effective_temperature(t) == 0:
        return (f"T = {t:.3g} is below {MIN_TEMPERATURE:.2g}, the smallest temperature the model's logits (float32 "
                "numbers) can be divided by: a smaller T rounds to 0, and the division gives no number at all. So "
                "T = 0 is used instead, which is what p(T) already is at that temperature: all the probability on "
                "the largest logit, greedy decoding.")
    return (f"T = {t:.3g} is above {MAX_TEMPERATURE:.2g}, the largest float32 number: T = ∞ is used instead, "
            "which is what p(T) already is there: uniform over every token.")


def temperature_softmax(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    """p_i(T) = exp(z_i/T) / sum_j exp(z_j/T) over the last dimension.

    Computed as exp((z_i - max z)/T): every exponent is <= 0, so nothing overflows for tiny T and the
    largest term is exactly 1. T = 0 is the limit itself: one-hot on the argmax, uniform over exact ties.
    T = inf is the other limit: uniform over the entries with finite logits. Logits of -inf get
    probability 0 at every T; a row whose entries are all -inf (nothing allowed) is uniform, which is
    what the tie rule gives when every entry ties.
    """
    t = _check_temperature(temperature)
    z = logits if logits.is_floating_point() else logits.float()
    if t == 1:  # the hot case (every generation step, after the temperature was applied): torch's softmax shifts
        p = torch.softmax(z, dim=-1)  # by the max itself; a row of all -inf, or with +inf, comes out NaN ...
        if not bool(p.isnan().any()):
            return p  # ... and takes the general path below instead
    zmax = z.amax(dim=-1, keepdim=True)
    if 0 < t < math.inf:
        ok = torch.isfinite(zmax)
        if bool(ok.all()):  # the usual case, once per generated token: no row needs the tie rule
            e = torch.exp((z - zmax) / t)  # gaps to the max are <= 0 (-inf stays -inf): nothing overflows
            return e / e.sum(dim=-1, keepdim=True)
    ties = (z == zmax).to(z.dtype)
    limit0 = ties / ties.sum(dim=-1, keepdim=True)  # one-hot, or uniform over the k tied maxima
    if t == 0:
        return limit0
    if math.isinf(t):
        finite = torch.isfinite(z).to(z.dtype)
        has = finite.sum(dim=-1, keepdim=True) > 0
        return torch.where(has, finite / finite.sum(dim=-1, keepdim=True).clamp_min(1), limit0)
    # gaps to the max are >= 0; rows with a max of +-inf would give inf - inf, so they fall back to the ties
    gaps = torch.where(ok, z - zmax, torch.zeros_like(z))  # (..., m) <= 0, -inf stays -inf
    e = torch.exp(gaps / t)
    p = e / e.sum(dim=-1, keepdim=True)
    return torch.where(ok, p, limit0)


def entropy(p) -> np.ndarray | float:
    """H(p) = -sum_i p_i log p_i in nats over the last axis, with 0 log 0 = 0: a float for one
    distribution (m,), an array for a stack of them (..., m)."""
    p = np.asarray(p, dtype=np.float64)
    h = -np.where(p > 0, p * np.log(np.where(p > 0, p, 1.0)), 0.0).sum(-1)
    return float(h) if h.ndim == 0 else h


def top_k_filter(logits: torch.Tensor, k: int | None) -> torch.Tensor:
    """Logits with every entry below the k-th largest set to -inf (a new tensor).

    Entries tied with the k-th largest are all kept, so top-k = 1 keeps every tied maximum, as T = 0 does.
    k = None, or k >= m, keeps everything."""
    if k is None:
        return logits.clone()
    k = int(k)
    if k < 1:
        raise ValueError(f"top-k must be at least 1, got {k}")
    if k >= logits.shape[-1]:
        return logits.clone()
    kth = torch.topk(logits, k, dim=-1).values[..., -1:]  # (..., 1) the k-th largest logit
    return logits.masked_fill(logits < kth, float("-inf"))


TOP_P_TOLERANCE = 1e-6


def top_p_filter(logits: torch.Tensor, p: float | None) -> torch.Tensor:
    """Nucleus filter: keep the most probable tokens whose probabilities (softmax of ``logits``) first
    reach a total of at least p; the rest get -inf. The most probable token is always kept, so p -> 0
    is greedy; p = None or p >= 1 keeps everything. Apply it to logits already divided by T."""
    if p is None:
        return logits.clone()
    p = float(p)
    if math.isnan(p) or p < 0:
        raise ValueError(f"top-p must be a number in [0, 1], got {p!r}")
    if p >= 1:
        return logits.clone()
    probs = temperature_softmax(logits, 1.0)
    sorted_p, order = torch.sort(probs, dim=-1, descending=True)
    before = torch.cumsum(sorted_p, dim=-1) - sorted_p  # mass of the strictly more probable tokens
    # a set within float32 rounding of p has reached p (0.5 can come out of a softmax as 0.49999997)
    drop_sorted = before >= p - TOP_P_TOLERANCE
    drop_sorted[..., 0] = False  # never empty
    drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)  # back to vocabulary order
    return logits.masked_fill(drop, float("-inf"))


def next_token_distribution(logits: torch.Tensor, temperature: float, top_k: int | None = None,
                            top_p: float | None = None) -> torch.Tensor:
    """The distribution a decoding step draws from: temperature first, then top-k, then top-p (on the
    tempered probabilities). At T = 0 the filters change nothing: the argmax is always kept."""
    t = _check_temperature(temperature)
    if t == 0:
        return temperature_softmax(logits, 0.0)
    return _tempered(logits if logits.is_floating_point() else logits.float(), t, top_k, top_p)


def _tempered(z: torch.Tensor, t, top_k: int | None, top_p: float | None) -> torch.Tensor:
    """next_token_distribution for T > 0: ``t`` a float, or a (B, 1) tensor of finite temperatures, one per row."""
    zmax = z.amax(dim=-1, keepdim=True)
    z = torch.where(torch.isfinite(zmax), z - zmax, z)  # shift first, so z/T cannot overflow for tiny T
    finite = not isinstance(t, float) or math.isfinite(t)  # a tensor of temperatures holds finite ones only
    z = z / t if finite else torch.where(torch.isfinite(z), torch.zeros_like(z), z)
    if top_k is not None:  # the filters copy the logits even when they keep everything: skip them when unset
        z = top_k_filter(z, top_k)
    if top_p is not None:
        z = top_p_filter(z, top_p)
    return temperature_softmax(z, 1.0)


def _row_distributions(logits: torch.Tensor, temps: list[float], top_k: int | None = None,
                       top_p: float | None = None) -> torch.Tensor:
    """(B, m) logits -> next_token_distribution of each row at its own temperature temps[r]. The rows with
    0 < T < inf go as one batch (the same operations row by row, so the same numbers as one row at a time; a test
    checks it bit for bit), the limits T = 0 and T = inf one row at a time."""
    plain = [r for r, t in enumerate(temps) if 0 < t < math.inf]
    if len(plain) == len(temps):  # no limit among them: one batch, no gathering
        return _tempered(logits, torch.tensor(temps, dtype=logits.dtype)[:, None], top_k, top_p)
    rows = torch.tensor(plain, dtype=torch.long)
    probs = torch.empty_like(logits)
    if plain:
        t = torch.tensor([temps[r] for r in plain], dtype=logits.dtype)[:, None]  # (b, 1)
        probs[rows] = _tempered(logits[rows], t, top_k, top_p)
    for r, t in enumerate(temps):
        if not 0 < t < math.inf:
            probs[r] = next_token_distribution(logits[r:r + 1], t, top_k, top_p)[0]
    return probs


def race(probs: torch.Tensor, noise: torch.Tensor) -> torch.Tensor:
    """(B, m) distributions and (B, m) (or (1, m)) draws E_i ~ Exp(1) -> (B,) tokens: argmax_i p_i / E_i. Token i
    wins this exponential race with probability p_i, and it is how ``torch.multinomial`` draws one sample (the same
    noise from the same generator, the same division and argmax: the same tokens, which a test checks). Written
    out, the noise can be drawn once and shared by rows that use the same generator."""
    return (probs / noise).argmax(dim=-1)


def exp_noise(shape, generator, dtype=torch.float32) -> torch.Tensor:
    """Exp(1) draws of ``shape`` from ``generator``, as ``torch.multinomial`` draws them."""
    return torch.empty(shape, dtype=dtype).exponential_(1, generator=generator)


def greedy(logits: torch.Tensor) -> torch.Tensor:
    """(B, m) logits -> (B,) tokens: the first of the largest, exactly what drawing at T = 0 gives (the argmax of the
    T = 0 distribution, one-hot or uniform over the tied maxima; a row with a NaN has no tie and gives 0 both ways),
    in three ops instead of seven: a greedy step is a few dozen small ops."""
    return (logits == logits.amax(dim=-1, keepdim=True)).to(logits.dtype).argmax(dim=-1)


def _draw(probs: torch.Tensor, temperature: float, generator) -> torch.Tensor:
    """(B, m) distributions -> (B,) tokens: the argmax at T = 0 (first of any exact ties), else a draw."""
    if temperature == 0:
        return probs.argmax(dim=-1)
    return race(probs, exp_noise(probs.shape, generator, probs.dtype))


def _draw_rows(probs: torch.Tensor, temps: list[float], gens: list) -> torch.Tensor:
    """(B, m) distributions -> (B,) tokens, row r at temps[r] with generator gens[r]. Rows that hold the same
    generator object share one (1, m) noise draw per step, so each draws what a one-row run with that generator
    draws (the page's continuations: one seed for every temperature); rows at T = 0 draw nothing and race against
    a noise of 1, which is their argmax."""
    noise = torch.ones_like(probs)
    by_gen: dict[int, list[int]] = {}
    for r, t in enumerate(temps):
        if t != 0:
            by_gen.setdefault(id(gens[r]), []).append(r)
    for rows in by_gen.values():
        noise[rows] = exp_noise((1, probs.shape[1]), gens[rows[0]], probs.dtype)
    return race(probs, noise)


@dataclass
class Step:
    """One generated token for each sequence of the batch."""
    token: torch.Tensor        # (B,) the chosen token ids
    prob: torch.Tensor         # (B,) the probability the model gave it, softmax(z) at T = 1
    sample_prob: torch.Tensor  # (B,) its probability under the distribution actually drawn from
    top_ids: torch.Tensor      # (B, k) the model's most likely tokens at this step, best first
    top_probs: torch.Tensor    # (B, k) their probabilities at T = 1
    window: int                # how many tokens the model read to produce this step
    slid: bool                 # True once the sequence outgrew n_ctx and the window slides


class Decoder:
    """One generation under way: its rows, how they sample, the text so far and the key/value cache. A step is
    ``read`` (run the model) then ``advance`` (sample from its logits). ``stream`` drives one Decoder alone; a
    scheduler may drive several and stack the full-window reads of those that ``reads_window`` into one forward pass
    (``bench.batching --page`` measures what that would buy)."""

    def __init__(self, model, idx, max_new_tokens: int, temperature, top_k: int | None = None,
                 top_p: float | None = None, generator=None, n_alternatives: int = 5, use_cache: bool = True,
                 hooks=None):
        idx = torch.as_tensor(idx, dtype=torch.long)
        if idx.dim() == 1:
            idx = idx[None]  # (n,) -> (1, n)
        if idx.dim() != 2 or idx.shape[1] == 0:
            raise ValueError("generation needs at least one token to start from")
        self.max_new_tokens = int(max_new_tokens)
        if self.max_new_tokens < 0:
            raise ValueError(f"max_new_tokens must be >= 0, got {max_new_tokens}")
        self.per_row = isinstance(temperature, (list, tuple))
        if self.per_row:
            self.temps = [_check_temperature(t) for t in temperature]
            self.gens = list(generator) if isinstance(generator, (list, tuple)) else [generator] * len(self.temps)
            if not len(self.temps) == len(self.gens) == idx.shape[0]:
                raise ValueError("give one temperature (and one generator) per row of idx")
        # the temperature as used (a T below MIN_TEMPERATURE is 0: drawn greedily, as _draw does at T = 0)
        self.temperature = self.temps if self.per_row else _check_temperature(temperature)
        self.generator, self.top_k, self.top_p = generator, top_k, top_p
        self.n_ctx = model.config.n_ctx
        self.k_alt = min(max(0, int(n_alternatives)), model.config.vocab_size)  # 0: no alternatives (fastest)
        self.use_cache = use_cache
        self.hooks = _hook_run(model, hooks)
        self.seq = idx.to(next(model.parameters()).device)
        self.past, self.pending = None, self.seq  # pending: tokens the model has not read yet
        self.made = 0

    @property
    def rows(self) -> int:
        return self.seq.shape[0]

    @property
    def done(self) -> bool:
        return self.made >= self.max_new_tokens

    @property
    def slid(self) -> bool:
        """The text has outgrown n_ctx: the window slides, and the next step re-reads all of it."""
        return self.seq.shape[1] > self.n_ctx

    def _cached(self) -> bool:
        """The next step reads only the new token(s), after the cached keys and values."""
        return (self.use_cache and not self.slid and self.past is not None
                and self.pending.shape[1] + self.past.length <= self.n_ctx)

    @property
    def reads_window(self) -> bool:
        """The next step reads exactly n_ctx tokens from position 0 and keeps no cache (the window slides, or has
        just filled up): the same shape for every sequence in this state, so several decoders' reads of this kind
        can share one forward pass (bench.batching measures it)."""
        return not self._cached() and self.window().shape[1] == self.n_ctx

    def window(self) -> torch.Tensor:
        """(B, n) the tokens a step that reads the window reads: the last n_ctx at most."""
        return self.seq[:, -self.n_ctx:]

    def read(self, model) -> torch.Tensor:
        """Run the model for the next step; (B, m) logits at the last position. Under inference mode. With the
        decoder's hooks (steering: core.analysis.steering) in every forward; without them (None) the plain forward.
        A cached step feeds the new token only, so its hooks change that token's activations; the cached keys and
        values came from activations the hooks had changed when those tokens were read. A slid step re-reads the
        whole window, hooks and all (the model then skips its last-block shortcut: a hook sees every position)."""
        hooked = {} if self.hooks is None else {"hooks": self.hooks}  # none: the call as before hooks existed
        if self._cached():
            out = model(self.pending, past=self.past, use_cache=True, last_only=True, **hooked)
        else:  # (re)build: read the whole window from position 0
            window = self.window()
            out = model(window, use_cache=self.use_cache and window.shape[1] < self.n_ctx, last_only=True, **hooked)
        self.past = out.present
        return out.logits[:, -1, :]

    def advance(self, logits: torch.Tensor) -> "Step":
        """The (B, m) logits of this step's read (by ``read``, or by the caller's forward pass over ``window()``
        when ``reads_window``) -> the Step that samples from them; the text grows by it."""
        slid, read = self.slid, self.window().shape[1]
        logits = logits.float()  # (B, m) at the last position
        if self.per_row:  # each row with its own temperature and its own random numbers
            probs = _row_distributions(logits, self.temps, self.top_k, self.top_p)
            token = _draw_rows(probs, self.temps, self.gens)
        elif self.temperature == 0 and not self.k_alt:  # greedy, tokens only (generate): no distribution needed
            probs, token = None, greedy(logits)
        else:
            probs = next_token_distribution(logits, self.temperature, self.top_k, self.top_p)
            token = _draw(probs, float(self.temperature), self.generator)
        if self.k_alt:
            model_p = temperature_softmax(logits, 1.0)
            top = torch.topk(model_p, self.k_alt, dim=-1)
            step = Step(token=token.cpu(), prob=model_p.gather(1, token[:, None])[:, 0].cpu(),
                        sample_prob=probs.gather(1, token[:, None])[:, 0].cpu(),
                        top_ids=top.indices.cpu(), top_probs=top.values.cpu(), window=read, slid=slid)
        else:  # generate() needs the tokens only
            step = Step(token=token, prob=None, sample_prob=None, top_ids=None, top_probs=None, window=read, slid=slid)
        self.seq = torch.cat([self.seq, token[:, None]], dim=1)
        self.pending = token[:, None]
        self.made += 1
        return step


def _hook_run(model, hooks):
    """None for no hooks (the plain forward), else one HookRun for every step of a generation, its names checked
    once: it keeps nothing, so a step leaves nothing in it for the next."""
    if hooks is None or isinstance(hooks, HookRun):
        return hooks
    hooks = list(hooks)
    if not hooks:
        return None
    run = HookRun(hooks)
    run.check_names(model.hook_names())
    return run


def stream(model, idx, max_new_tokens: int, temperature, top_k: int | None = None,
           top_p: float | None = None, generator=None, n_alternatives: int = 5,
           use_cache: bool = True, hooks=None) -> Iterator[Step]:
    """Yield one Step per new token. ``idx`` is (B, n) token ids with n >= 1 (or a list of ids).

    ``temperature`` and ``generator`` may also be lists, one per row: the rows then share every forward
    pass (one batch) but each samples as it would alone, so row r gives exactly what a one-row call with
    temperature[r] and a generator in the state of generator[r] gives. Rows may hold the same generator object
    (or one generator given for all rows): they then share its draws, one per step, as if each had its own
    copy. use_cache=False recomputes the whole window every step (the
    textbook loop), for comparison. ``hooks``: (name, fn) pairs run in every forward of the loop (steering); None or
    empty: the plain forward."""
    decoder = Decoder(model, idx, max_new_tokens, temperature, top_k, top_p, generator, n_alternatives, use_cache,
                      hooks)
    return _run(model, decoder)


def _run(model, decoder: Decoder) -> Iterator[Step]:
    with torch.inference_mode():  # no autograd bookkeeping at all: about 10% faster per step than no_grad
        while not decoder.done:
            yield decoder.advance(decoder.read(model))


def generate(model, idx, max_new_tokens, temperature, top_k=None, top_p=None, generator=None, use_cache=True,
             hooks=None):
    """(B, n) token ids -> (B, n + max_new_tokens): greedy at T = 0, sampled otherwise (seeded by
    ``generator``), with the key/value cache (use_cache=False: the plain loop), sliding the window past n_ctx."""
    idx = torch.as_tensor(idx, dtype=torch.long)
    squeeze = idx.dim() == 1
    seq = idx[None] if squeeze else idx
    # each new token moved to the CPU, beside seq, whatever device the model runs on
    new = [s.token[:, None].cpu() for s in stream(model, seq, max_new_tokens, temperature, top_k, top_p, generator,
                                                  n_alternatives=0, use_cache=use_cache, hooks=hooks)]
    out = torch.cat([seq.cpu(), *new], dim=1)
    return out[0] if squeeze else out
