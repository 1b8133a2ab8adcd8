import streamlit as st

from core.analysis import attribution as A
from core.analysis.attribution_prune import prune, scores
from core.analysis import attribution_probes as P
from core.analysis import attribution_cost as AC
from core.analysis.picks import nan_argmax
from core.figures.attribution_graph import graph_figure
from core.nn.tokenizer_base import fragment_note
from core.serve.fmt import head_label, visible
from pages.attribution import share as ash, view as av
from ui import chart, ensure_frame, model_key, prompt_input, require_model
from pages.attribution.parts import graph_groups, transcoders_of, with_words
from pages.attribution.controls import controls_section
from core.analysis.supernodes import group_id, group_id_of, merge, switched_off
from ui.caching import model_cache
from ui.code_box import code_box
from core.views import snippets as SN

ensure_frame()  # run inside app.py's frame even when this page's URL is the first request

MAX_TOKENS = 64  # the graph is drawn for the last 64 tokens at most: past that it holds thousands of feature nodes
DEFAULT = "Long live the king! Long live the queen! Long live the k"  # the second "k": copy "i" from "king"?

st.title("Attribution graph")
st.markdown(
    "Patching tells *where* the information behind a prediction sits, one whole component at a time. An attribution "
    "graph draws the route: from the prompt's tokens, through the features the model computes, to the output. Each "
    "MLP is replaced by a *transcoder*, a sparse map from what the MLP reads to what it writes, whose few active "
    "features can be read one by one; what it misses is kept as an *error node*. With every attention pattern and "
    "every LayerNorm's scale frozen at this prompt's values, everything between two nodes is linear, so each edge is "
    "an exact direct effect: the source's activation times how much its target's input moves per unit of it.")
st.latex(r"w_{s \to t} = a_s \, \frac{\partial\, x_t}{\partial a_s}\Big|_{\text{patterns, LN scales frozen}}, "
         r"\qquad x_t = \sum_s w_{s \to t} + b_t")
st.caption("x_t is the target's input: a feature's pre-activation, or an output's logit minus the mean logit over "
           "the vocabulary (circuit-tracer's target: what makes this token likelier than the rest); b_t collects what "
           "no node carries: the biases, the LayerNorm shifts and the position embeddings. Ameisen et al. (2025), "
           "*Circuit Tracing*; the open circuit-tracer computes the same graph for large pretrained models on GPUs.")

entry, model, tok = require_model(": the graph runs a real model")
problem = av.too_big(model.config)
if problem:
    st.info(problem)
    st.stop()
found = transcoders_of(entry, model)
if found.problem:
    st.info(found.problem)
    st.stop()
tcs = found.tcs
mkey = f"{model_key(entry)}|{found.key}"  # the model's weights and its transcoders': a retrained one is another graph
LINK = ash.read_link(tok, model.config.n_ctx)  # prompt, share, cap now; output, node, off once the graph is built
prompt = prompt_input("Prompt", DEFAULT, "attr_prompt", tok, model.config.n_ctx, height=80)
if prompt.empty or len(prompt.ids) < 2:
    st.info(f"Type a prompt of at least two {tok.units}: the graph explains the prediction after its last one.")
    st.stop()
ids = tuple(prompt.ids[-MAX_TOKENS:])
if len(prompt.ids) > MAX_TOKENS:
    st.caption(f"The graph reads the last {MAX_TOKENS} of the prompt's {len(prompt.ids)} {tok.units}.")
cap = st.number_input("Feature nodes at most", 1, None, None, 500, key="attr_cap", placeholder="every active feature",
                      help="circuit-tracer's max_feature_nodes: the features with the most influence on the output "
                           "are kept, and what the others write joins their block's error node (every edge stays "
                           "exact). Empty: every active feature.")
cap = None if cap is None else int(cap)
# its size before it is built (one forward pass): densely firing transcoders would ask for tens of GiB
try:
    budget = AC.graph_budget()
except ValueError as e:
    st.error(f"No graph can be built: {e}.")
    st.stop()
plan = model_cache(lambda ids, cap, budget: AC.plan_graph(model, tcs, list(ids), cap, budget, units=tok.units), 16,
                   what="sizing the graph")(mkey, ids, cap, budget)
if plan.refusal:
    st.warning(plan.refusal, icon=":material/memory:")
    if plan.fits_cap:
        st.button(f"Keep at most {plan.fits_cap:,} feature nodes", key="attr_fit_cap",
                  on_click=lambda c=plan.fits_cap: st.session_state.update(attr_cap=c))
    st.stop()
# seconds of backward passes: the long lane, where generation waits, not the short one of the few-hundred-ms views
graph_of = model_cache(lambda ids, token, cap, batch: A.attribution_graph(model, tcs, list(ids), logit_tokens=token,
                                                                          max_feature_nodes=cap, batch=batch), 4,
                       what="the attribution graph", spinner="Tracing every edge ...", resource=True, lane="long")
at = (cap, plan.batch)  # how the page's graphs are built: every cache below that reads one names it


def _sources(ids, token, cap, batch):
    """A capped graph's feature nodes (the others are in its error nodes), None for every active feature."""
    graph = graph_of(mkey, ids, token, cap, batch)
    return [tuple(f) for f in graph.features.tolist()] if graph.dropped else None


first = graph_of(mkey, ids, None, *at)
text = lambda t: tok.shown_text([t])  # noqa: E731  one token id -> its text (a byte fragment as ⟨f0⟩, never �)
choices = first.logit_tokens
if st.session_state.get("attr_for") != (mkey, ids):  # a new prompt (or model): its own outputs and nodes
    st.session_state["attr_for"] = (mkey, ids)
    # set, not popped: a popped box's closed text kept the old graph's value in the browser until another rerun
    st.session_state["attr_token"] = choices[0]
    st.session_state.pop("attr_graph_for", None)
choices = ash.apply_output(choices, text)  # a link's output applied, after the reset on a new prompt
if note := fragment_note(" ".join(text(t) for t in [*ids, *choices])):  # said once, where a byte piece first shows
    st.caption(note)
explain = st.selectbox("Output to explain", choices, format_func=lambda t: f"{visible(text(t))!r}  "
                       f"(p = {first.logit_probs[choices.index(t)]:.2f})", key="attr_token",
                       help="The likeliest next tokens, as many as cover 95 % of the probability (at most 10).")
g = graph_of(mkey, ids, (explain,), *at) if explain != choices[0] else first
token = None if g is first else (explain,)
graph_key = (mkey, ids, explain, cap)
if st.session_state.get("attr_graph_for") != graph_key:  # node numbers are a graph's own: other output, other nodes
    st.session_state["attr_graph_for"] = graph_key
    for stale in ("attr_node", "attr_pinned", "attr_group_members"):
        st.session_state.pop(stale, None)
node_share = st.slider("Keep the nodes that carry this share of the influence on the output", 0.5, 0.99, 0.8, 0.01,
                       key="attr_nodes", help="circuit-tracer's pruning: 0.8 by default; edges are then kept up "
                                              "to 98 % of what flows through the kept nodes.")
# pruning and the scores read the whole N x N adjacency: once per graph and share, not on every rerun
pr = model_cache(lambda ids, token, cap, batch, share: prune(graph_of(mkey, ids, token, cap, batch), share), 4,
                 what="pruning the graph", resource=True)(mkey, ids, token, *at, node_share)
replacement, completeness = model_cache(lambda ids, token, cap, batch: scores(graph_of(mkey, ids, token, cap, batch)),
                                        8, what="the graph's scores")(mkey, ids, token, *at)
m1, m2, m3, m4 = st.columns(4)
m1.metric("Replacement score", av.fmt_score(replacement),
          help="Share of the tokens' influence on the output that flows through features rather than error nodes.")
m2.metric("Completeness score", av.fmt_score(completeness),
          help="Share of every node's input (weighted by its influence) that comes from features or tokens.")
m3.metric("Active features", f"{g.n_features:,}", help="Over every position and block, before pruning"
          + (f"; {g.dropped:,} more are folded into the error nodes by the cap." if g.dropped else "."))
m4.metric("Features · edges kept", f"{int(pr.node_mask[:g.n_features].sum())} · {int(pr.edge_mask.sum())}")
kept = tuple((int(g.features[i][0]), int(g.features[i][2])) for i in range(g.n_features) if pr.node_mask[i])
tops = model_cache(lambda feats: av.top_tokens(model, tcs, feats, text), 32)(mkey, kept)
feature_text = dict(zip((i for i in range(g.n_features) if pr.node_mask[i]), tops))
nodes, edges = av.pruned_lists(g, pr, text, feature_text)
explained = with_words(entry, g.n_layers, nodes, g)  # each feature's explanation in its hover text
pickable = sorted((n for n in nodes if n["kind"] in ("features", "logits")), key=lambda n: -n["influence"])
if st.session_state.get("attr_node") not in {n["node"] for n in pickable}:  # this graph's own: its top logit
    st.session_state["attr_node"] = g.slices()["logits"].start
ash.apply_nodes(g, pickable)  # a link's node and features off, after the reset on a new output
sel = st.selectbox("Node to inspect", [n["node"] for n in pickable],
                   format_func=lambda i: av.node_label(g, i, text), key="attr_node")
feats = [n["node"] for n in pickable if n["kind"] == "features"]
groups = graph_groups(graph_key, feats, lambda i: av.node_label(g, i, text),
                      av.proposed_groups(g, nodes, tcs, feature_text, words=explained))


def _clicked():
    """A click on a feature or an output in the graph inspects it (errors and embeddings have no inputs to show)."""
    known = {n["node"] for n in pickable}
    for point in st.session_state["attr_fig"].selection.points:  # the node's marker, not an edge's middle under it
        node = point.get("customdata")
        node = node[0] if isinstance(node, list) and node else node
        if isinstance(node, (int, float)) and int(node) in known:
            st.session_state["attr_node"] = int(node)
            return


options = feats + [group_id(k) for k in range(len(groups))]
pinned = st.session_state["attr_pinned"] = [i for i in st.session_state.get("attr_pinned", []) if i in options]
chart(graph_figure(*merge(nodes, edges, groups), g.n_layers, g.n_pos, selected=sel,
                   pinned=pinned),
      width="stretch", key="attr_fig", on_select=_clicked, selection_mode="points")
st.caption("Each feature is labelled with the token it promotes most (read straight through to the output); hover it "
           "for what it reads, in words with their detection score (its explanation). Click a feature or the output "
           "to inspect it below: its edges light up; hover an edge's middle for its weight.")
ash.share_row(LINK, g, pr, text, entry.name, tok.decode(list(ids)), explain, node_share, sel, groups)
controls_section(graph_of, mkey, ids, token, at, model.config.vocab_size, lambda gr, i: av.node_label(gr, i, text),
                 plan.seconds)
if av.node_kind(g, sel) == "features":
    l, p, f = (int(v) for v in g.features[sel])
    prof = model_cache(lambda ids, l, f: P.feature_profile(model, tcs, list(ids), l, f), 32)(mkey, ids, l, f)
    st.markdown(av.feature_words(prof, l, f, g.ids, text, p))

st.subheader("What feeds it, and through which heads")
head_parts = model_cache(lambda ids, token, cap, batch, target: A.head_split(model, tcs, graph_of(
    mkey, ids, token, cap, batch), [target]), 16, what="the head split")
parts = head_parts(mkey, ids, token, *at, sel)
st.dataframe(av.strongest_edges(g, sel, text, {k: v[0] for k, v in parts.items()}), hide_index=True, width="stretch",
             key="attr_edges", column_config={"weight": st.column_config.NumberColumn(format="%+.3f")})
st.caption("Each edge split by the paths it takes, exactly, since the patterns are frozen: *direct* along the "
           "residual stream alone, L·H· through that one head, *composed* through two heads in turn.")

st.subheader("Switch features off")
pinned = st.multiselect("Features to switch off", options,
                        format_func=lambda i: f"group {groups[group_id_of(i)][0]}" if i < 0 else av.node_label(g, i, text),
                        key="attr_pinned", max_selections=12)
if pinned:
    off = model_cache(lambda ids, feats: P.switch_off(model, tcs, list(ids), feats), 16, what="the switched-off run")
    every = sorted(switched_off(pinned, groups))  # a group: its members
    result = off(mkey, ids, tuple(tuple(int(v) for v in g.features[i]) for i in every))
    st.markdown(av.switch_words(result, text, g.logit_tokens[0]))

st.subheader("Why a head attends here, by features")
busiest = av.busiest_head(parts)  # (block, head) carrying most of the inspected node's edges, or None
if busiest is not None and st.session_state.get("attr_qk_for") != (ids, sel):
    st.session_state["attr_qk_for"] = (ids, sel)  # a new node: open its busiest head where it looks hardest
    attends = model_cache(lambda ids, l, h: P.attention_row(model, list(ids), l, h), 32)(mkey, ids, *busiest)
    looks = nan_argmax(attends)  # a NaN weight is no place to look: np.argmax would pick it
    st.session_state.update(attr_qk_layer=busiest[0], attr_qk_head=busiest[1],
                            attr_qk_key=(len(ids) - 1 if looks is None else looks[0]) + 1)
st.session_state.setdefault("attr_qk_layer", model.config.n_layers - 1)
st.session_state["attr_qk_key"] = min(max(1, int(st.session_state.get("attr_qk_key", len(ids)))), len(ids))
h1, h2, h3 = st.columns(3)
layer = h1.selectbox("Block", range(model.config.n_layers), format_func=lambda l: f"block {l + 1}",
                     key="attr_qk_layer")
head = h2.selectbox("Head", range(model.config.n_heads), format_func=lambda h: head_label(layer, h),
                    key="attr_qk_head")
key_pos = h3.number_input("Key position", 1, len(ids), key="attr_qk_key",
                          help="The query is the last position; the key any position up to it. It opens where the "
                               "head that carries most of the inspected node's edges looks hardest.")
qk = model_cache(lambda ids, token, cap, batch, l, h, k: A.qk_split(model, tcs, list(ids), l, h, len(ids) - 1, k,
                                                                    features=_sources(ids, token, cap, batch)), 16,
                 what="the query-key split")(mkey, ids, token, *at, layer, head, int(key_pos) - 1)
st.markdown(f"The score of {head_label(layer, head)} from the last position to position {int(key_pos)} is "
            f"**{qk['score']:.3f}**; its largest query-side × key-side terms:")
st.dataframe(av.qk_rows(qk, av.source_labels(g, text)), hide_index=True, width="stretch", key="attr_qk",
             column_config={"term": st.column_config.NumberColumn(format="%+.3f")})
st.caption("Each term is a query-side source's part of the query dotted with a key-side source's part of the key, "
           "over the square root of the head's width; with the constant terms they add up to the score. An induction "
           "head's signature: on the key side, the token *before* the key position (moved there by a block-1 head "
           "that looks one back), matched on the query side by the same token at the end of the prompt.")
code_box(SN.attribution(entry.path, entry.step, tok, prompt.text, ids, token, cap, node_share, g, sel))
