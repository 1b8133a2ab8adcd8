import streamlit as st

from core.analysis.circuit import share_text
from core.figures import patching_figures as PF
from core.analysis.patching import HEAD_KINDS, Metric, check_pair
from core.analysis.prompt_pairs import stack_rows, strongest_head
from core.serve.fmt import head_label, shown_pos
from core.serve.links import Field, LinkSpec
from ui.links import link_box, use_link
from ui.code_box import code_box
from core.views import snippets as SN
from ui import approved, cached_figure, ensure_frame, in_steps, model_key, prompt_input, require_model, shared_chart
from pages.cause_effect.parts import make_corrupted, make_example, make_one_length, path_section, patching_runs, sources_section
from pages.cause_effect.hunt import hunt, hunt_mode

ensure_frame()  # run inside app.py's frame even when this page's URL is the first request

CLEAN_KEY, CORRUPT_KEY = "cause_clean", "cause_corrupt"
EXAMPLE_PERIOD, EXAMPLE_SECOND = 24, 16  # the example: 24 random tokens, then the first 16 of them again
GRID_AUTO_S = 15   # a grid expected to take longer waits for a button press
CANDIDATES = 8     # answer tokens offered: each run's likeliest next tokens

st.title("Cause and effect")
if hunt_mode():  # issue 59's hunt for a known circuit: a view of its own, which stops the page
    hunt()
st.markdown(
    "Two prompts that differ in one token make the model predict two different things. Which parts of the "
    "network carry that difference? **Activation patching** answers it: run the *corrupted* prompt, but put back "
    "one activation (the residual stream at one position, one head's output) as it was in the *clean* run, and "
    "measure how much of the clean answer comes back. A patch that restores everything found a place the "
    "information must pass through; one that restores nothing found a place it never visits.")
st.latex(r"\text{restored} = \frac{M(\text{corrupted run, one activation from the clean run}) - M(\text{corrupted})}"
         r"{M(\text{clean}) - M(\text{corrupted})}, \qquad M = \ell_{\text{answer}} - \ell_{\text{wrong}}")
st.caption("M is the logit difference between the two answer tokens at the last position (or the log-probability of "
           "the answer). 0 means the patch changed nothing, 1 that the clean answer is fully back; values below 0 or "
           "above 1 happen when a patch pushes further than either run.")

entry, model, tok = require_model()
c = model.config
mkey = model_key(entry)
R = patching_runs(model, tok)  # every run below, cached for the server: R.heads(mkey, clean, corrupt, metric, "z")
patch_heatmap, head_table_figure, sources_figure = map(cached_figure, (PF.patch_heatmap, PF.head_table_figure,
                                                                       PF.sources_figure))
PAIR = (CLEAN_KEY, CORRUPT_KEY)
_corrupt = (make_corrupted, (model, tok, *PAIR))  # the buttons' callbacks, with what they read
_example = (make_example, (model, tok, *PAIR, EXAMPLE_PERIOD, EXAMPLE_SECOND))


# the pair is cut together, to one length in tokens, when a link must be shortened; layer, head and pos are applied
# below, once the prompts' length and the strongest head are known
LINK = LinkSpec({"prompt": Field(("prompt", tok, c.n_ctx), CLEAN_KEY, cut=True),
                 "corrupt": Field(("prompt", tok, c.n_ctx), CORRUPT_KEY, cut=True),
                 "layer": Field(("index", c.n_layers)), "head": Field(("index", c.n_heads)),
                 "pos": Field(("index", c.n_ctx))},
                same_length=lambda a, b: len(tok.encode(a, errors="drop")) == len(tok.encode(b, errors="drop")))
link = use_link(LINK)
if "prompt" in link.values and "corrupt" not in link.values:  # a link with one prompt: its corrupted copy made here
    _corrupt[0](*_corrupt[1])
if CLEAN_KEY not in st.session_state:  # the page opens on the example
    _example[0](*_example[1])
left, right = st.columns(2)
with left:
    clean = prompt_input("Clean prompt", None, "cause_clean", tok, c.n_ctx, height=110)
with right:
    corrupt = prompt_input("Corrupted prompt (the same length, something changed)", None, "cause_corrupt", tok, c.n_ctx,
                           height=110)
b1, b2, note = st.columns([1, 1.5, 2.5], vertical_alignment="center")
b1.button("Make a corrupted copy", key="cause_make", on_click=_corrupt[0], args=_corrupt[1], disabled=clean.empty,
          help=f"Copies the clean prompt into the corrupted box with one {tok.unit} changed: the earlier occurrence of "
               f"the last {tok.unit} if there is one (where an induction head looks), else the last {tok.unit}. "
               f"Press again for another replacement {tok.unit}.")
b2.button("Example: the induction circuit", key="cause_example", on_click=_example[0], args=_example[1],
          help=f"Random {tok.units} written twice, the second copy cut short: only copying can predict what comes "
               "next. The corrupted prompt changes the earlier occurrence of the last one.")
note.caption(f"The example is {EXAMPLE_PERIOD} random {tok.units} followed by the first {EXAMPLE_SECOND} of them "
             f"again. Every {tok.unit} of the second copy has been seen before, so the next one can be copied from the "
             "first copy, which is what an induction head does.")
if clean.empty or corrupt.empty:
    st.info(f"Type a clean prompt on the left, then press **Make a corrupted copy** (or write your own corrupted "
            f"prompt of the same number of {tok.units} on the right).")
    st.stop()
a_ids, b_ids = tuple(clean.ids), tuple(corrupt.ids)
why_not = check_pair(model, a_ids, b_ids)
if why_not:
    st.warning(f"These prompts cannot be patched into each other: {why_not}.", icon="⚠️")
    m1, m2, _ = st.columns([1.2, 1.6, 1.2])  # room for each label whole: a cut-off "Pad…" says nothing
    m1.button("Cut the longer one's start", key="cause_cut", on_click=make_one_length, args=(tok, *PAIR, "cut"), width="stretch")
    m2.button("Pad the shorter one's start with spaces", key="cause_pad", on_click=make_one_length, args=(tok, *PAIR, "pad"),
              width="stretch")
    st.stop()
n = len(a_ids)
tokens = tok.visible_tokens(list(a_ids))
diff = [i for i in range(n) if a_ids[i] != b_ids[i]]
if not diff:
    st.warning("The two prompts are the same, so the two runs agree and there is nothing to restore: the measure "
               "below would divide by zero. Press **Make a corrupted copy** to change one token.", icon="⚠️")
    st.stop()
shown = {i: f"'{tokens[i]}' → '{tok.visible_tokens([b_ids[i]])[0]}' at position {i + 1}" for i in diff[:6]}
made = st.session_state.get("cause_changed")
why = f" ({made[4]})" if made and made[0] == b_ids and len(diff) == 1 else ""
st.caption(f"The prompts differ in {len(diff)} {tok.unit if len(diff) == 1 else tok.units}: "
           + "; ".join(shown.values()) + ("; ..." if len(diff) > 6 else "") + why + ".")

# ------------------------------------------------------------------ the answers and the metric
st.header("What the two runs predict")
cands = list(dict.fromkeys(R.top(mkey, a_ids, CANDIDATES) + R.top(mkey, b_ids, CANDIDATES)))
answer0, wrong0 = R.defaults(mkey, a_ids, b_ids)
label = lambda t: f"'{tok.visible_tokens([t])[0]}'"  # noqa: E731
pair = f"{hash((a_ids, b_ids)) & 0xFFFFFFFF:08x}"  # new prompts open on their own defaults
k1, k2, k3 = st.columns([1, 1, 2])
answer = k1.selectbox("Answer (the clean run's)", cands, index=cands.index(answer0), format_func=label,
                      key=f"cause_answer_{pair}")
kind = k3.radio("Measure", ("difference", "log-probability"), horizontal=True, key="cause_measure",
                format_func={"difference": "logit difference answer − wrong",
                             "log-probability": "log-probability of the answer"}.get)
wrong = k2.selectbox("Wrong answer (the corrupted run's)", cands, index=cands.index(wrong0), format_func=label,
                     key=f"cause_wrong_{pair}", disabled=kind != "difference")
metric = Metric(int(answer), int(wrong) if kind == "difference" else None)
m_clean, m_corrupt = R.metric(mkey, a_ids, metric), R.metric(mkey, b_ids, metric)
g1, g2, _ = st.columns([1, 1, 2])
g1.metric("M on the clean prompt", f"{m_clean:.3f}")
g2.metric("M on the corrupted prompt", f"{m_corrupt:.3f}", delta=f"{m_corrupt - m_clean:+.3f}")
if metric.wrong == metric.answer or abs(m_clean - m_corrupt) < 1e-9:
    st.warning("The measure is the same on both prompts (or answer and wrong answer are the same token), so no patch "
               "can restore anything and the share restored is undefined. Pick two different answer tokens, or "
               "change the corrupted prompt where it matters for the last prediction.", icon="⚠️")
    st.stop()
if abs(m_clean - m_corrupt) < 0.5:
    st.caption("The two runs differ by less than half a logit: the shares below divide by a small number and are "
               "noisy. A corruption that changes the prediction more gives a clearer picture.")

# ------------------------------------------------------------------ the residual stream
def _pick_cell():
    """Selection callback: the clicked (stage, position) of the residual grid, for this pair of prompts."""
    points = st.session_state["cause_resid"].selection.points
    if points and points[0].get("customdata") is not None:
        st.session_state["cause_cell"] = (pair, *(int(v) for v in points[0]["customdata"][:2]))


st.header("Where the difference travels: the residual stream")
st.markdown(
    "The row *enters L2* is the stream that block 2 reads (counting from 1); the last row leaves the last block and is read out. "
    "At the embedding only the changed position carries the difference, so only that cell restores the answer; "
    "by the last row only the last position matters, because that is where the prediction is read. In between, "
    "the bright cells show where the model moved the information: a jump from the changed position to a later "
    "one happens inside a block's attention.")
stages = c.n_layers + 1
est = stages * R.seconds(mkey, n, n)
if approved(("cause_grid", pair), est, GRID_AUTO_S, f"Compute the grid (about {est:.0f} s)",
            f"{stages} runs of {n} copies of the corrupted prompt, one stage at a time.", f"cause_grid_btn_{pair}"):
    grid = stack_rows(in_steps(stages, lambda s: R.residual(mkey, a_ids, b_ids, metric, s),
                               "Patching the residual stream, stage by stage", bar=est > 2))
    names = [f"enters L{l + 1}" for l in range(c.n_layers)] + [f"leaves L{c.n_layers}"]
    names[0] = "embedding (enters L1)"
    shared_chart(patch_heatmap(grid, tokens, names, "Residual stream: share restored by one position's stream",
                               changed=diff[0] if len(diff) == 1 else None), width="stretch", theme=None,
                 key="cause_resid", on_select=_pick_cell, selection_mode="points")
    cell = st.session_state.get("cause_cell")
    if cell and cell[0] == pair and cell[1] < stages and cell[2] < n:
        r, p = cell[1], cell[2]
        st.info(f"{names[r]}, position {p + 1} ('{tokens[p]}'): putting this one vector back restores "
                f"{share_text(grid[r, p])} of the clean answer.", icon=":material/touch_app:")
    else:
        st.caption("Click a cell to read its value in words; the framed column is the changed position.")

    sub = R.sublayers(mkey, a_ids, b_ids, metric)  # (L, 2, n)
    sub_names = [f"L{l + 1} {part}" for l in range(c.n_layers) for part in ("attention", "MLP")[:sub.shape[1]]]
    shared_chart(patch_heatmap(sub.reshape(-1, n), tokens, sub_names,  # (L, 2 or 1 without an MLP, n) -> (rows, n)
                               "What each block's attention and MLP wrote at one position",
                               changed=diff[0] if len(diff) == 1 else None),
                 width="stretch", theme=None, key="cause_sub")
    st.caption("An attention row that restores the answer at a position the corruption never touched moved the "
               "difference there from another position; an MLP row can only work on what its own position holds.")

# ------------------------------------------------------------------ heads
st.header("Which heads carry it")
what = st.radio("Put back each head's", HEAD_KINDS, horizontal=True, key="cause_what",
                format_func={"z": "output z (everything)", "q": "queries", "k": "keys", "v": "values",
                             "pattern": "attention pattern"}.get)
st.markdown("Each cell: one head's activation put back from the clean run at every position, everything else "
            "corrupted. The **output** z tells whether the head carries the difference at all; queries, keys and "
            "values tell through which of its inputs it gets it. An induction head restores through its output; "
            "its keys restore it when the corruption broke what the previous-token head wrote.")
table = R.heads(mkey, a_ids, b_ids, metric, what)
best = strongest_head(R.heads(mkey, a_ids, b_ids, metric, "z"))  # the page opens on the head that matters most
head_key = "cause_head"
if "layer" in link.values or "head" in link.values:  # a link's head: the table's pick and the sources' head
    was = st.session_state.get(head_key, best)
    st.session_state[head_key] = (link.values.get("layer", was[0]), link.values.get("head", was[1]))
    st.session_state["cause_src_head"] = st.session_state[head_key]
if "pos" in link.values and link.values["pos"] < n:
    st.session_state["cause_src_i"] = shown_pos(link.values["pos"])  # the box counts from 1, as the screen does
if head_key not in st.session_state or not (0 <= st.session_state[head_key][0] < c.n_layers
                                            and 0 <= st.session_state[head_key][1] < c.n_heads):
    st.session_state[head_key] = best


def _pick_head():
    points = st.session_state["cause_heads"].selection.points
    if points and points[0].get("customdata") is not None:
        st.session_state[head_key] = tuple(int(v) for v in points[0]["customdata"][:2])


shared_chart(head_table_figure(table, f"Heads: share restored by one head's {what}",
                               selected=st.session_state[head_key]),
             width="stretch", theme=None, key="cause_heads", on_select=_pick_head, selection_mode="points")
hl, hh = st.session_state[head_key]
st.caption(f"Click a head to see it position by position (now: {head_label(hl, hh)}, framed).")
per = stack_rows([R.positions(mkey, a_ids, b_ids, metric, hl, hh, w) for w in ("z", "q", "k", "v")])
shared_chart(patch_heatmap(per, tokens, ["output z (query pos.)", "queries (query pos.)", "keys (key pos.)",
                                         "values (key pos.)"],
                           f"{head_label(hl, hh)}, one position at a time",
                           changed=diff[0] if len(diff) == 1 else None),
             width="stretch", theme=None, key="cause_positions")
st.caption("Output and queries are put back at one query position, keys and values at one key position. A "
           "single bright key cell is the position whose key the head looks up; its value cell, what it copies.")

# ------------------------------------------------------------------ path patching
st.header("Following one path: sender → receivers")
if c.n_layers < 2:
    st.info("Path patching needs a head in an earlier layer sending to one in a later layer; this model has one layer.")
else:
    path_section(R, mkey, c, a_ids, b_ids, metric)

# ------------------------------------------------------------------ why the head attends here
st.header("Why does this head attend here?")
st.markdown(
    "A score is a dot product of a query and a key, and both are sums: the residual stream at a position is the "
    "token embedding plus the position embedding plus what every earlier head and MLP wrote there. So the score "
    "splits exactly into one term per pair (query-side source, key-side source). LayerNorm's division by the "
    "stream's size is a number per position: it is frozen at its real value, and its shift (with the bias of "
    "$W_Q$ or $W_K$) becomes a source of its own.")
st.latex(r"s_{ij} = \frac{1}{\sqrt{d_h}} \Big(\sum_a W_Q\,\tilde x^{(a)}_i\Big)^{\!\top}\Big(\sum_b W_K\,\tilde x^{(b)}_j\Big)"
         r" = \sum_{a,b} \frac{(W_Q \tilde x^{(a)}_i)^\top (W_K \tilde x^{(b)}_j)}{\sqrt{d_h}}")
sl, i = sources_section(R, mkey, c, a_ids, b_ids, metric, tokens, (hl, hh), pair, GRID_AUTO_S)

from pages.cause_effect.controls import controls_section  # noqa: E402  (here: the page's first lines are another's)
controls_section(model, mkey, a_ids, b_ids, metric, sl, R.seconds(mkey, c.n_heads, n))

st.divider()
link_box(LINK, {"layer": sl[0], "head": sl[1], "pos": i})
code_box(SN.cause_effect(entry.path, entry.step, tok, clean.text, a_ids, corrupt.text, b_ids, metric, what))
