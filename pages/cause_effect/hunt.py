"""The learner's hunt (issue 59 §3), a view of the Cause and effect page: pick an answer key's model, run one of the
explorer's methods on it, pick the components you believe form its circuit, score the pick against the key
(core.analysis.hunt.score_pick), and only then see the key and the method's own grade against it. Below: every
method's grade on every key as bench.answer_keys measured it, and one grade run live."""
from __future__ import annotations

import math

import pandas as pd
import streamlit as st

from core.analysis import grading as G
from core.analysis.answer_keys import accuracy, all_components, chance, list_keys, load_key
from core.analysis.hunt import (edge_label, edge_lines, failures, method_scores, pick_words, read_grades, score_pick,
                                stands_on)
from core.figures.answer_key_figures import key_figure, scores_figure
from ui.charts import cached_figure, shared_chart
from ui.compute import gated

MODES = {"patching": "Patch a prompt pair", "hunt": "Hunt a known circuit (answer keys)"}
EXAMPLES = 8     # examples of the task a method is run on here, live (the bench's table: G.EXAMPLES)
LIVE_S = 30      # a live grade expected to take longer is refused, in words
NUMBERS = ("AUROC", "precision", "recall", "finding", "random twin", "nonsense task")  # the table's numbers
SCORED = "hunt_scored"  # session state: {key name: the pick that was scored}; the key shows once it is there
METHOD_WORDS = {"patching": "Activation patching", "ablation": "Switching each head off", "dla": "Direct logit "
                "attribution", "path_patching": "Path patching (head → head)", "edge_ablation": "Cutting each edge",
                "attribution_graph": "The attribution graph", "attribution_graph_edges": "The attribution graph's edges"}
TEACH = (
    "Every method on this page says *where* the model computes something. None of them can tell, on its own, "
    "whether the circuit it points at is the real one. These small models were trained so that their circuit is "
    "known: the **answer key**. Run a method on one, decide which heads and MLPs you believe form the circuit, and "
    "score your pick against the key. **Precision** asks how much of your pick is right; **recall** asks how much "
    "of the circuit you found; **F1** is high only when both are.")
F1 = (r"\begin{gathered}P = \text{precision} = \frac{|\text{pick} \cap \text{key}|}{|\text{pick}|} \\ R = \text{recall} = "
      r"\frac{|\text{pick} \cap \text{key}|}{|\text{key}|} \\ F_1 = \frac{2\,PR}{P + R}\end{gathered}")  # one a line: a phone


def hunt_mode() -> bool:
    """The page's view switch: True when the learner chose the hunt (the page opens on patching, as its links do)."""
    return st.radio("View", tuple(MODES), horizontal=True, key="cause_mode", format_func=MODES.get,
                    label_visibility="collapsed") == "hunt"


@st.cache_resource(max_entries=8, show_spinner="Loading the answer key's model ...")
def _key(name: str):
    """load_key's (model, tokenizer, key, task): one object for the server, never changed."""
    return load_key(name)


@st.cache_data(max_entries=16, show_spinner=False)
def _card(name: str) -> tuple[float, float]:
    model, _, _, task = _key(name)
    return accuracy(model, task), chance(task)


@st.cache_data(max_entries=64, show_spinner="Running the method on the key's task ...")
def _scores(name: str, method: str):
    """The method's scores on EXAMPLES examples, and the seconds they took."""
    model, _, _, task = _key(name)
    return method_scores(model, task, method, EXAMPLES)


@st.cache_data(max_entries=32, show_spinner="Grading the method, with its two controls ...")
def _grade(name: str, method: str) -> G.Grade:
    return G.grade(name, method, loaded=_key(name))


def hunt():
    """The hunt, then st.stop(): the patching view below does not run."""
    st.markdown(TEACH)
    st.latex(F1)
    names = list_keys()
    if not names:
        st.error("No answer key is shipped with this copy of the explorer (assets/answer_keys/ is empty).")
        st.stop()
    if st.session_state.get("hunt_key") not in (None, *names):  # a key that left the shelf since this session chose it
        st.info(f"The answer key {st.session_state.pop('hunt_key')!r} is gone; pick another.")
    name = st.selectbox("Answer key", names, key="hunt_key")
    model, tok, key, task = _key(name)
    _show_card(name, tok, key, task)
    method = st.radio("Method", G.METHODS, horizontal=True, key="hunt_method", format_func=METHOD_WORDS.get)
    scores, seconds = _scores(name, method)
    scored = st.session_state.setdefault(SCORED, {}).get(name)
    members = tuple(bool(m) for m in G.truth(key, scores)) if scored is not None else None
    labels = tuple(edge_label(n) if scores.level == "edges" else n for n in scores.names)
    if labels:
        shared_chart(cached_figure(scores_figure)(labels, tuple(float(v) for v in scores.values), scores.threshold,
                                                  f"{METHOD_WORDS[method]} on {name}: {EXAMPLES} examples, "
                                                  f"{seconds:.2f} s", members), width="stretch", theme=None)
    else:
        st.info(f"{METHOD_WORDS[method]} scores edges from an earlier head to a later one; this model has one layer, "
                "so it has none. Try another method.")
    st.caption("Larger = more part of the circuit, by this method's measure. Bars at or past the dashed line are "
               "what the method's page would call part of the circuit.")
    picked = st.multiselect("Your circuit: the components you believe carry the task", all_components(model.config),
                            key=f"hunt_pick_{name}")  # one pick per key: switching keys keeps no foreign names
    if st.button("Score my pick", key="hunt_score", type="primary"):
        try:
            score_pick(key, picked, model.config)
            st.session_state[SCORED][name] = tuple(picked)
            st.rerun()
        except ValueError as e:
            st.warning(f"Not scored: {e}.")
    if scored is None:
        st.caption("The key stays hidden until you score a pick.")
    else:
        _reveal(name, model, key, scored, picked, method, scores)
    _table(name, method, seconds)
    st.stop()


def _show_card(name: str, tok, key, task):
    acc, base = _card(name)
    c = _key(name)[0].config
    st.markdown(f"**Task.** {key.task}.  \n**Model.** {c.n_layers} layer(s) of {c.n_heads} heads"
                f"{' and an MLP' if c.mlp else ''}, d = {c.d_model}. **Accuracy** on its {len(task.prompts)} prompts: "
                f"{acc:.1%} (the commonest answer alone: {base:.1%}).")
    st.code(f"{tok.decode(list(task.prompts[0]))}  →  {tok.decode([task.answers[0]])}", language=None)


def _reveal(name: str, model, key, scored: tuple, picked: list, method: str, scores):
    try:
        s = score_pick(key, scored, model.config)
    except ValueError as e:  # the key changed under a pick scored before
        st.warning(f"The pick you scored no longer fits this key: {e}. Pick again and press **Score my pick**.")
        return
    cols = st.columns(3)
    for col, (label, v) in zip(cols, (("Precision", s.precision), ("Recall", s.recall), ("F1", s.f1))):
        col.metric(label, f"{v:.2f}")
    st.markdown(f"Your pick {', '.join(s.picked)}: {pick_words(s)}")
    if tuple(picked) != scored:
        st.caption("You changed your pick since you scored it: press **Score my pick** again to score the new one.")
    st.subheader("The key")
    st.markdown(f"**Components:** {', '.join(key.components)}.  \n**Edges:** " + "; ".join(edge_lines(key)) + ".")
    c = model.config
    shared_chart(cached_figure(key_figure)(tuple(all_components(c)), key.components, key.edges, c.n_layers,
                                           c.n_heads, f"The circuit of {name}, as its key says"),
                 width="stretch", theme=None)
    truth = G.truth(key, scores)
    auc = G.auroc(scores.values, truth)
    p, r = G.precision_recall(scores.values, truth, scores.threshold)
    st.markdown(f"**The method's own grade** on these {EXAMPLES} examples: "
                + (f"AUROC {auc:.2f} (1 = every key member scores above every other), precision {_f(p)} and recall "
                   f"{_f(r)} at its threshold {scores.threshold:.2f}." if not math.isnan(auc) else
                   f"none: the key holds nothing of what {METHOD_WORDS[method].lower()} scores."))
    with st.expander("The key's card (how the model was made)"):
        st.markdown((key.folder / "README.md").read_text(encoding="utf-8"))


def _f(x: float) -> str:
    return "—" if math.isnan(x) else f"{x:.2f}"


def _table(name: str, method: str, seconds: float):
    st.subheader("Every method on every key")
    rows = read_grades()
    if rows:
        st.dataframe(pd.DataFrame(
            [{"key": r["key"], "method": r["method"], "AUROC": r["auroc"], "precision": r["precision"],
              "recall": r["recall"], "finding": r["finding"], "random twin": r["random_twin"],
              "nonsense task": r["nonsense_task"], "unit": r["unit"],
              "verdict": {True: "stands", False: "does not stand", None: "no grade"}[r["stands"]]} for r in rows]),
            hide_index=True, width="stretch", height=300, column_config={c: st.column_config.NumberColumn(format="%.2f")
                                                                         for c in NUMBERS})
        st.caption(f"Measured by `python -m bench.answer_keys` ({G.EXAMPLES} examples a grade; "
                   "bench/results/answer-keys.csv). AUROC, precision and recall grade the method's scores against "
                   "the key. The **finding** is the method's largest score, what its page would claim; the controls "
                   "are the largest score the same method gives on a random-weight twin of the model and on the "
                   "same examples measured on random tokens, in the same unit (a share of the trained model's "
                   "answer, or nats of loss). A finding stands when it is at least "
                   f"{100 * G.MARGINS['share']:.0f} points (shares) or {G.MARGINS['nats']:.1f} nats above both.")
        good, bad = stands_on(rows), failures(rows)
        st.markdown("**Where the methods fail** (a failure is a result, not a bug):\n" + "\n".join(
            f"- {METHOD_WORDS.get(m, m)}: " + ("; ".join(f"{why} on {', '.join(keys)}" for why, keys in
                                                     bad.get(m, {}).items()) or "fails on no key")
            + (f". Its finding stands on {', '.join(good[m])}." if m in good else ". Its finding stands on no key.")
            for m in dict.fromkeys(r["method"] for r in rows)))
    else:
        st.info("The measured table (bench/results/answer-keys.csv) is missing: run `python -m bench.answer_keys`.")
    est = seconds / EXAMPLES * G.EXAMPLES * 2  # the method on G.EXAMPLES examples, then on the twin (the nonsense
    #                                             labels are read off the method's own runs)
    if est > LIVE_S:
        st.info(f"Grading {METHOD_WORDS[method].lower()} on {name} live would take about {est:.0f} s, over the "
                f"{LIVE_S} s a live grade may take here; its row above was measured by the bench.")
    elif st.button(f"Grade {METHOD_WORDS[method].lower()} on {name} now (about {max(est, 1):.0f} s)",
                   key="hunt_grade") or (name, method) in st.session_state.get("hunt_graded", set()):
        st.session_state.setdefault("hunt_graded", set()).add((name, method))
        g = gated(_grade, "grading a method")(name, method)
        st.markdown(f"Measured now on {G.EXAMPLES} examples in {g.seconds + g.control_seconds:.1f} s: AUROC "
                    f"{_f(g.auroc)}, precision {_f(g.precision)}, recall {_f(g.recall)}. The finding: "
                    f"{g.scores.claim or 'none'}. Verdict: {g.verdict}")
