"""The Cause and effect page's glue: its server caches of the patching runs and its prompt pair's buttons (the
example, a corrupted copy, one length for both). The patching itself is core.analysis.patching."""
from __future__ import annotations

from types import SimpleNamespace

import streamlit as st

from core.analysis.attention import head_attention
from core.analysis.circuit import default_key, path_defaults, read_circuit, share_text
from core.analysis.induction import head_scores
from core.analysis.timing import forward_seconds
from core.analysis.prompt_pairs import corrupt_prompt, example_pair, match_lengths
from core.analysis.patching import (default_answers, patch_head_positions, patch_heads, patch_residual, patch_sublayers,
                                    path_patch, paths_into, score_sources, sources_refusal, top_predictions)
from core.analysis.circuit import sources_view
from core.figures.patching_figures import sources_figure
from core.serve.fmt import head_label, pos_label
from ui.caching import model_cache
from ui.charts import cached_figure, shared_chart
from ui.prompts import prompt_ids_now, set_prompt_ids

WHAT = "the patching runs"
_sources_figure = cached_figure(sources_figure)  # the figure object, reused for the same inputs (ui.charts)


def patching_runs(model, tok) -> SimpleNamespace:
    """Every run the page shows, each ``run(model_key, *args)``: cached for the server by the model's key and the
    inputs (ui.model_cache), in the compute line when the server is busy, a cached result skipping it. Prompts
    travel as tuples of ids, a Metric as itself."""
    L = list
    return SimpleNamespace(
        residual=model_cache(lambda a, b, m, stage: patch_residual(model, L(a), L(b), m, stages=[stage])[0], 64,
                             what=WHAT),
        sublayers=model_cache(lambda a, b, m: patch_sublayers(model, L(a), L(b), m), 16, what=WHAT,
                              spinner="Patching every block's attention and MLP ..."),
        heads=model_cache(lambda a, b, m, what: patch_heads(model, L(a), L(b), m, what=what), 32, what=WHAT,
                          spinner="Patching every head ..."),
        positions=model_cache(lambda a, b, m, l, h, what: patch_head_positions(model, L(a), L(b), m, l, h, what), 64,
                              what=WHAT),
        path=model_cache(lambda a, b, m, s, r, via: path_patch(model, L(a), L(b), s, L(r), via, m), 64, what=WHAT),
        paths=model_cache(lambda a, b, m, r: paths_into(model, L(a), L(b), r, m), 32, what=WHAT),
        sources=model_cache(lambda a, l, h, i, j: score_sources(model, L(a), l, h, i, j), 32, what=WHAT),
        pattern=model_cache(lambda a, l, h: head_attention(model, L(a), l, h)[1], 16, what=WHAT),
        scores=model_cache(lambda: head_scores(model, tokenizer=tok), 8, what=WHAT,
                           spinner="Measuring induction on repeated random sequences ..."),
        top=model_cache(lambda a, k: top_predictions(model, L(a), k), 64),
        defaults=model_cache(lambda a, b: default_answers(model, L(a), L(b)), 64),
        metric=model_cache(lambda a, m: m(model, L(a)), 128),
        seconds=model_cache(lambda rows, length: forward_seconds(model, rows, length), 64),
    )


def make_corrupted(model, tok, clean_key: str, corrupt_key: str):
    """Button callback: the clean prompt with one token changed (core.analysis.patching.corrupt_prompt), a fresh token each
    press; what changed is kept as ``cause_changed`` for the page's sentence."""
    ids = prompt_ids_now(clean_key, tok)
    if not ids:
        return
    seed = int(st.session_state.get("cause_corrupt_draws", 0))
    st.session_state["cause_corrupt_draws"] = seed + 1
    done = corrupt_prompt(tok, ids, model.config.vocab_size, seed=seed)
    set_prompt_ids(corrupt_key, tok, done.ids)
    st.session_state["cause_changed"] = (tuple(done.ids), done.position, done.old, done.new, done.why)


def make_example(model, tok, clean_key: str, corrupt_key: str, period: int, again: int):
    """Button callback: random tokens written twice, the second copy cut short, and the corrupted copy with the
    earlier occurrence of the last token changed: the induction circuit's example (a new draw each press)."""
    draws = int(st.session_state.get("cause_draws", 0))
    st.session_state["cause_draws"] = draws + 1
    clean, _, _, _ = example_pair(model, tok, seed=2000 + draws, period=period, again=again)
    set_prompt_ids(clean_key, tok, clean)
    make_corrupted(model, tok, clean_key, corrupt_key)


def make_one_length(tok, clean_key: str, corrupt_key: str, how: str):
    """Button callback: both prompts cut (``how`` "cut") or padded with spaces ("pad") to one length, each keeping
    its end, where the metric is read."""
    pad = (tok.encode(" ", errors="drop") or [0])[0]
    a, b = match_lengths(prompt_ids_now(clean_key, tok), prompt_ids_now(corrupt_key, tok), how, pad)
    set_prompt_ids(clean_key, tok, a)
    set_prompt_ids(corrupt_key, tok, b)


def path_section(R, mkey: str, c, a_ids: tuple, b_ids: tuple, metric):
    """Path patching between two heads, for the page's pair of prompts: the prose with the defaults found on this
    model (the strongest previous-token head sending to the strongest later induction head, NaN skipped), the
    sender, receivers and input picked, and the share restored through each input beside the sender's whole output."""
    scores = R.scores(mkey)
    sender0, receiver0 = path_defaults(scores.previous_token, scores.induction)
    st.markdown(
        "Patching a whole head cannot tell *which* later head it talks to. Path patching lets only the sender's "
        "clean output reach the receivers, and only through one of their inputs; every other head and MLP stays "
        "frozen at the corrupted run. For the induction circuit: the previous-token head (sender) writes "
        "\"the token before me was X\" at each position, and the induction head (receiver) builds its **keys** "
        f"from it. Defaults: the head with the highest previous-token score ({head_label(*sender0)}, "
        f"{scores.previous_token[sender0]:.2f}) sending to the head with the highest induction score among the later "
        f"layers ({head_label(*receiver0)}, {scores.induction[receiver0]:.2f}).")
    senders = [(l, h) for l in range(c.n_layers - 1) for h in range(c.n_heads)]
    p1, p2, p3 = st.columns([1, 2, 1])
    sender = p1.selectbox("Sender", senders, index=senders.index(sender0), key="cause_sender",
                          format_func=lambda p: head_label(*p))
    options = [(l, h) for l in range(sender[0] + 1, c.n_layers) for h in range(c.n_heads)]
    rkey = f"cause_receivers_{sender[0]}"
    st.session_state.setdefault(rkey, [receiver0] if receiver0 in options else options[:1])
    receivers = p2.multiselect("Receivers (later layers)", options, key=rkey, format_func=lambda p: head_label(*p))
    via = p3.radio("Through their", ("q", "k", "v"), index=1, horizontal=True, key="cause_via",
                   format_func={"q": "queries", "k": "keys", "v": "values"}.get)
    values = {v: R.path(mkey, a_ids, b_ids, metric, sender, tuple(receivers), v) for v in ("q", "k", "v")}
    v1, v2, v3, v4 = st.columns(4)
    for col, v, word in ((v1, "q", "queries"), (v2, "k", "keys"), (v3, "v", "values")):
        col.metric(f"via {word}" + ("  ◀" if v == via else ""), share_text(values[v]))
    v4.metric(f"{head_label(*sender)}'s whole output", share_text(R.heads(mkey, a_ids, b_ids, metric, "z")[sender]))
    if not receivers:
        st.caption("No receivers: nothing reaches the network, so the patch restores exactly 0.")
    else:
        st.caption(f"The share of the clean answer restored when only {head_label(*sender)}'s clean output reaches "
                   f"{', '.join(head_label(*r) for r in receivers)}, and only through their {via}. The last figure is "
                   "the sender's output patched everywhere, for comparison: the path's share of it is what this one "
                   "connection carries.")


def sources_section(R, mkey: str, c, a_ids: tuple, b_ids: tuple, metric, tokens: list[str], head0: tuple[int, int],
                    pair: str, auto_s: float) -> tuple[tuple[int, int], int]:
    """One attention score of the clean prompt split by the sources of its query and key (core.analysis.patching.score_sources):
    the head (``head0`` by default), query i and key j picked (j: where the head looks most, per prompt pair), the
    table, and what it shows in words (core.analysis.circuit.read_circuit, with every earlier head's path into the
    keys when that takes at most ``auto_s`` seconds, else on a button). Returns (head, i) for the page's link."""
    n = len(a_ids)
    s1, s2, s3, s4 = st.columns(4)
    heads_all = [(l, h) for l in range(c.n_layers) for h in range(c.n_heads)]
    if st.session_state.get("cause_src_head") not in heads_all:  # the default as state (no index=): a link may set it
        st.session_state["cause_src_head"] = head0
    sl = s1.selectbox("Head", heads_all, key="cause_src_head", format_func=lambda p: head_label(*p))
    if not 1 <= int(st.session_state.get("cause_src_i", n)) <= n:  # a shorter prompt than the last one
        st.session_state["cause_src_i"] = n
    st.session_state.setdefault("cause_src_i", n)
    i = int(s2.number_input("Query position i", 1, n, key="cause_src_i")) - 1  # the box counts from 1
    pattern_row = R.pattern(mkey, a_ids, *sl)[i]
    j_default = default_key(pattern_row, i)  # the box is keyed by the prompt pair too: a new prompt opens on its default
    j = int(s3.number_input("Key position j (default: where it looks most)", 1, i + 1,
                            j_default + 1, key=f"cause_src_j_{pair}_{i}_{sl[0]}_{sl[1]}")) - 1
    s4.metric("weight a[i, j]", f"{pattern_row[j]:.3f}")
    why_not = sources_refusal(c)
    if why_not:  # a post-norm or residual-free variant: its stream is no sum to split
        st.info(f"The score is not split here: {why_not}.")
        return sl, i
    full, src_names, score = R.sources(mkey, a_ids, sl[0], sl[1], i, j)
    shown_t, rows_n, cols_n, reading = sources_view(full, src_names, k=10)
    shared_chart(_sources_figure(shown_t, rows_n, cols_n, f"{head_label(*sl)}: score of query {pos_label(i, tokens[i])} "
                                 f"for key {pos_label(j, tokens[j])} = {score:.2f}, split by source"),
                 width="stretch", theme=None, key="cause_sources")
    st.caption(f"The entries add up to the score {score:.3f} (their sum: {full.sum():.3f}). On the clean prompt."
               + (" Only the ten largest sources of each side are drawn; 'all others' holds the rest." if
                  len(src_names) > 10 else ""))
    key_part = (f"Summed over the query's side, the source of the key's stream that adds most to the score is "
                f"**{reading.key_builder}** ({reading.key_total:+.2f}); of the query's, **{reading.query_builder}** "
                f"({reading.query_total:+.2f}). The largest single entry pairs the query's {reading.query_source} with "
                f"the key's {reading.key_source} ({reading.value:+.2f}).")
    paths_s = 2 * sl[0] * c.n_heads * R.seconds(mkey, n, n) / n  # two passes per earlier head (core.analysis.patching.paths_into)
    paths_go = paths_s <= auto_s or st.session_state.get(f"cause_paths_go_{pair}")
    circuit = read_circuit(reading, score, R.scores(mkey).previous_token,
                           R.paths(mkey, a_ids, b_ids, metric, sl) if paths_go else None)
    (st.success if circuit.circuit else st.info)(key_part + " " + circuit.text + (
        f" On the query's side the largest source is an earlier head, **{reading.query_builder}**."
        if reading.composition in ("Q", "QK") else ""))
    if not paths_go:
        st.button(f"Follow every earlier head's path into {head_label(*sl)}'s keys (about {paths_s:.0f} s)",
                  key=f"cause_paths_btn_{pair}", on_click=st.session_state.__setitem__,
                  args=(f"cause_paths_go_{pair}", True))
    return sl, i
