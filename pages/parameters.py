import streamlit as st

from core.serve import fmt
from core.analysis import cost
from pages.parameters.figures import flops_figure, parameter_bar, timing_figure
from core.nn.config import ModelConfig, config_problems
from core.nn.params import count_parameters, per_block_latex, share_latex
from core.serve.links import Field, LinkSpec
from ui.links import link_box, use_link
from ui import DEFAULT_MODEL, chart, current, ensure_frame, shipped_config
from ui.cached import meta_tables, sublayer_timing

ensure_frame()  # run inside app.py's frame even when this page's URL is the first request

st.title("Parameters and cost")
st.markdown(
    "How big is a transformer, and what does running it cost? The first half counts every weight matrix from "
    "the shape of the model and checks the count against a real PyTorch model. The second half prices one "
    "layer in multiplications, finds the sequence length where attention's n² terms take over, and then "
    "times the loaded model on this machine to see whether the prediction holds."
)

shipped, shipped_training = shipped_config()  # a broken shipped folder: a warning, and no preset for it
SHAPES = cost.preset_configs(shipped, DEFAULT_MODEL)
selected, selected_model, _ = current()
if selected is not None and selected.name != DEFAULT_MODEL:  # the model picked in the sidebar, a GPT-2 one say
    SHAPES[f"{selected.name} (selected)"] = selected_model.config
FIELDS = [("par_d", "d_model", "width d"), ("par_h", "n_heads", "heads h"), ("par_L", "n_layers", "blocks L"),
          ("par_dff", "d_ff", "MLP width d_ff"), ("par_m", "vocab_size", "vocabulary m"), ("par_nctx", "n_ctx", "context n_ctx")]

COUNT_COLUMNS = {  # wide enough for the longest part and formula in full (GPT-2's tied output map, its biases)
    "part": st.column_config.TextColumn(width=410), "formula": st.column_config.TextColumn(width=190),
    "by formula": st.column_config.NumberColumn(format="localized", width=125), "counted in the model":
        st.column_config.NumberColumn("counted", format="localized", width=125, help="counted in the model")}
TERMS = [("par_bias", "bias", "biases on every linear map (GPT-2)"),
         ("par_tied", "tie_weights", "output map tied to the token embedding (GPT-2)")]


def apply_preset():
    config = SHAPES[st.session_state.par_preset]
    for key, attr, _ in FIELDS + TERMS:
        st.session_state[key] = getattr(config, attr)


if "par_preset" not in st.session_state or st.session_state.par_preset not in SHAPES:
    st.session_state.par_preset = next(iter(SHAPES))
    apply_preset()
_flag = (lambda v: v == "1", lambda b: int(bool(b)))  # a toggle in a link: 0 or 1
LINK = LinkSpec({"preset": Field(("choice", tuple(SHAPES)), "par_preset"),
                 **{attr: Field(("int", 1, 300 if attr == "n_layers" else 2_000_000), key) for key, attr, _ in FIELDS},
                 "bias": Field(("choice", ("0", "1")), "par_bias", *_flag),
                 "tied": Field(("choice", ("0", "1")), "par_tied", *_flag)})
link = use_link(LINK)
if "preset" in link.values:  # the preset fills in the shape, then the link's own fields change it
    apply_preset()
    st.session_state.update(LINK.updates({k: v for k, v in link.values.items() if k != "preset"}))

st.header("Counting the parameters")
st.selectbox("Preset", list(SHAPES), key="par_preset", on_change=apply_preset,
             help="Fills in the shape below; every field can then be changed by hand.")
cols = [col for _ in range(2) for col in st.columns(3)]  # two rows of three: room for a 7-digit value
for col, (key, attr, label) in zip(cols, FIELDS):
    col.number_input(label, min_value=1, max_value=300 if attr == "n_layers" else 2_000_000, step=1, key=key)
for col, (key, attr, label) in zip(st.columns(len(TERMS)), TERMS):
    col.toggle(label, key=key, help="GPT-2's terms: the lecture's model has neither. A tied output map reuses the "
                                    "embedding matrix, so it adds no parameters.")
values = {attr: int(st.session_state[key]) for key, attr, _ in FIELDS}
values.update({attr: bool(st.session_state[key]) for key, attr, _ in TERMS})
# the activation changes no count; a selected model's other fields come with its preset
values.update({k: v for k, v in SHAPES[st.session_state.par_preset].to_dict().items() if k in ("activation", "ln_eps")})
link_box(LINK)
problems = config_problems(values)  # the one shape check; this form's bounds leave n_heads the only field it refuses
for col, (key, attr, label) in zip(cols, FIELDS):
    if attr in problems:  # said under the field, and the rest of the page goes on without it
        col.error(f"This shape cannot be built: {problems[attr]}", icon=":material/block:")
if set(problems) - {"n_heads"}:
    st.stop()
# no count depends on h (heads split the width): what needs no h goes on with one head; what needs h says so
config = ModelConfig(**{**values, "n_heads": 1} if problems else values)
c, d, L = config, config.d_model, config.n_layers
counts = count_parameters(config)


def refused(what: str) -> bool:  # True, with a note in the section's place, while the heads field is refused
    if problems:
        st.info(f"{what} needs a valid number of heads h: fix it above.", icon=":material/block:")
    return bool(problems)


table, sweep = meta_tables(tuple(sorted(config.to_dict().items())))

st.markdown(
    "Attention stores W_Q, W_K and W_V for every head (each d × d/h) plus W_O (d × d); the MLP stores W1 and W2; "
    "each of the two LayerNorms learns a scale and a shift per feature"
    + ("; with biases (GPT-2) each of those four maps and both MLP maps adds a vector: 3d + d for attention, "
       "d_ff + d for the MLP" if c.bias else "") + ". One block therefore holds")
di, small = fmt.latex_int(d), "13d" if c.bias else "4d"
st.latex(per_block_latex(c, general=True) + (rf"\quad (= 12d^2 + {small} \text{{ when }} d_{{ff}} = 4d)" if c.d_ff == 4 * d else ""))
if c.tie_weights:
    st.caption("The output map is tied to the token embedding: it is the same m × d matrix read backwards, so it "
               "adds no parameters of its own (the output row of the table shows 0).")
if c.d_ff == 4 * d:
    st.markdown(f"Dropping the small {small} and multiplying by the depth gives the lecture's size estimate:")
    st.latex(rf"12 d^2 L = 12({di})^2({L}) \approx {fmt.latex_sci(12 * d * d * L)}")


def count_metric(col, label, value, note=""):
    """Exact digits while they fit the column, 1.752 × 10¹¹ beyond a billion (exact value in the tooltip)."""
    col.metric(label, f"{value:,}" if value < 1e9 else fmt.pretty_sci(value, 4), help=f"{value:,} parameters. {note}".strip())


m1, m2, m3, m4 = st.columns(4)
count_metric(m1, "Parameters per block", counts["per_block"])
count_metric(m2, f"All {L} blocks", counts["blocks"])
count_metric(m3, "Whole model", counts["total"])
count_metric(m4, "Tied output map", cost.tied_total(config),
             "The total if the output map reuses the token embedding matrix, as GPT-2 and GPT-3 do (GPT-2 also adds "
             "biases: switch them on above).")

st.subheader("Every matrix, counted twice")
st.markdown(
    "The **by formula** column comes from the shape alone. The **counted** column builds a real `Transformer` with "
    "this shape on PyTorch's `meta` device, where tensors have shapes but no storage, so even 175 billion "
    "parameters take no memory, and adds up the sizes of its tensors.")
if not refused("Building the model"):  # a meta model is built with the very shape, h included
    st.dataframe([{**row, "agree": "✓" if row["agree"] else "✗"} for row in table], hide_index=True, width="stretch",
                 height=35 * (len(table) + 1) + 3, column_config=COUNT_COLUMNS)
chart(parameter_bar(counts, L), width="stretch")
share = counts["attention"] / counts["per_block"], counts["mlp"] / counts["per_block"]
a1, a2, a3 = st.columns([1, 1, 3])
a1.metric("Attention's share of a block", f"{share[0]:.1%}")
a2.metric("MLP's share of a block", f"{share[1]:.1%}")
attn_share, mlp_share = share_latex(c)
a3.latex(rf"{attn_share} = {share[0]:.3f}, \qquad {mlp_share} = {share[1]:.3f}")
st.caption("With d_ff = 4d that is 4d² against 8d²: a third and two thirds, less the norms' sliver. "
           "The sublayer the architecture is named after is the smaller one.")

st.subheader("The number of heads changes nothing")
st.markdown(
    f"h heads of width d/h hold h · 3 · d · d/h = 3d² query, key and value weights, whatever h is. Below, one block "
    f"of width d = {d:,} is built on the meta device for several h and counted.")
st.dataframe(sweep, hide_index=True, width="stretch",
             column_config={k: st.column_config.NumberColumn(format="localized") for k in sweep[0]})

st.header("The cost of attention")
st.markdown(
    "Running one layer on n tokens costs multiplications of two kinds. The attention scores compare every query "
    "with every key, and the weighted sum mixes every value into every output: n² pairs, each an inner product "
    "of length d/h in each of h heads. The four projections and the MLP act on each token separately: n tokens, "
    "each a matrix-vector product of size about d². A recurrent layer, for comparison, walks the sequence with "
    "two d × d products per step.")
st.latex(r"\underbrace{h \cdot n^2 \tfrac{d}{h}}_{QK^\top} + \underbrace{h \cdot n^2 \tfrac{d}{h}}_{AV} = 2n^2 d"
         r"\qquad \underbrace{4nd^2}_{W_Q, W_K, W_V, W_O} + \underbrace{2n\,d\,d_{ff}}_{\text{MLP}}"
         r"\qquad \underbrace{2nd^2}_{h_t = \tanh(W h_{t-1} + U x_t)}")
n_block, n_proj, n_rec = cost.crossover_block(d, c.d_ff), cost.crossover_projections(d), cost.crossover_recurrent(d)
chart(flops_figure(d, c.d_ff, n_ctx=c.n_ctx), width="stretch")
st.markdown("Setting the n² terms equal to the others and dividing by 2nd gives each crossover:")
st.latex(rf"2n^2 d = 4nd^2 + 2n\,d\,d_{{ff}} \iff n = 2d + d_{{ff}} = {fmt.latex_int(n_block)}")
st.latex(rf"2n^2 d = 2nd^2 \iff n = d = {fmt.latex_int(n_rec)}")
where = "below" if c.n_ctx < n_block else "beyond"
st.markdown(
    f"- Inside the attention sublayer alone, the n² terms overtake the four projections at n = 2d = {n_proj:,}.\n"
    f"- For the whole block they overtake projections plus MLP at **n = {n_block:,}**; this model's context "
    f"n_ctx = {c.n_ctx:,} lies {where} it, so {'the per-token matrices, not attention, dominate its cost' if where == 'below' else 'long prompts are dominated by attention'}.\n"
    f"- Is attention cheaper than a recurrent layer, which mixes the sequence with 2nd² multiplications? Its mixing is, "
    f"exactly when **n < d = {n_rec:,}**. "
    "Attention's real advantage is elsewhere: all n positions are computed at once instead of one after another.")

st.subheader("Memory for the attention weights")
st.markdown(
    "Training keeps every attention weight until the backward pass needs it: h matrices of n × n per layer. "
    "The layer inputs, n × d per layer, are shown for scale: they grow with n, the weights with n².")
k1, k2 = st.columns(2)
n_mem = k1.number_input("sequence length n", min_value=1, max_value=10_000_000, value=cost.LECTURE_LONG_CONTEXT,
                        step=1000, key="par_mem_n")
dtype = k2.selectbox("number format", list(cost.DTYPES), key="par_mem_dtype")
if not refused("Counting the attention weights (h · n² · L)"):
    mem = cost.attention_memory(int(n_mem), d, c.n_heads, L, dtype)
    st.latex(rf"n^2 = ({fmt.latex_int(n_mem)})^2 = {fmt.latex_sci(mem['per_head_layer'])} \text{{ weights per head per layer}}")
    st.latex(rf"h\,n^2 L = {c.n_heads} \cdot {fmt.latex_sci(mem['per_head_layer'])} \cdot {L} = "
             rf"{fmt.latex_sci(mem['weights'])} \text{{ weights}} \times {mem['bytes_per_value']} \text{{ bytes}}")
    x1, x2, x3 = st.columns(3)
    x1.metric("Attention weights, all layers", fmt.human_bytes(mem["weight_bytes"]))
    x2.metric("Layer inputs n·d·L, for scale", fmt.human_bytes(mem["stream_bytes"]))
    x3.metric("Ratio h·n/d", f"{mem['weights'] / mem['stream']:,.0f}×")
    st.caption("Per sequence; a batch multiplies both. Fused kernels such as FlashAttention avoid storing the weights "
               "by recomputing them in the backward pass, trading memory for time.")

st.subheader("Measured on this machine")
entry, model, _ = current()
if model is None:
    st.info("No model is loaded, so there is nothing to time. Pick one in the sidebar.")
else:
    info = cost.machine_info()
    # timed on this page run's own thread count (core.serve.threads.page_threads): a count of its own would change
    # the one torch gives every other session's next run; the count is in the key, so the cache stays honest
    threads = info["torch_threads"]
    mc = model.config
    t = sublayer_timing(entry.name, model, threads, again=st.button("Measure again", key="par_remeasure"))
    st.markdown(
        f"The first block of **{entry.name}** (d = {mc.d_model}, h = {mc.n_heads}, d_ff = {mc.d_ff}) is called on "
        f"random inputs of n = {t.ns[0]:,} to {t.ns[-1]:,} tokens; its sublayers never see positions, so n may exceed "
        f"n_ctx = {mc.n_ctx}. Each time is the fastest of several calls. The slope of log time against log n is the "
        "exponent: 1 for linear growth, 2 for quadratic."
    )
    chart(timing_figure(t, entry.name), width="stretch")
    lo, hi = t.fit_from, t.ns[-1]
    expect_a = cost.local_slope(lambda n: cost.attention_sublayer(n, mc.d_model), lo, hi)
    s1, s2, s3 = st.columns(3)
    s1.metric("Attention: measured slope", f"{t.attention_slope:.2f}", help="fitted over the shaded range")
    s2.metric("Attention: slope of 2n²d + 4nd²", f"{expect_a:.2f}", help="what the multiplication count predicts there")
    s3.metric("MLP: measured slope", f"{t.mlp_slope:.2f}", help="the count 2n·d·d_ff predicts exactly 1")
    ra, rm = t.last_doubling()
    st.markdown(f"Doubling n from {t.ns[-2]:,} to {t.ns[-1]:,} multiplied attention's time by **{ra:.1f}** "
                f"(4 would be purely quadratic) and the MLP's by **{rm:.1f}** (2 would be purely linear).")
    cores = f"{info['physical_cores']} physical cores, " if info["physical_cores"] else ""
    st.caption(
        f"Machine: {info['cpu']}, {cores}{info['logical_cpus']} logical CPUs ({info['usable_cpus']} usable by this "
        f"process); timed with {t.threads} torch thread{'s' if t.threads != 1 else ''} (torch {info['torch']}), "
        f"{t.total_s:.1f} s in all, measured once and cached. Fitted over n = {lo:,} to {hi:,}. Other programs and "
        "memory effects (caches, fresh pages for large tensors) bend single points; Measure again to check."
    )

st.header("Training and inference in FLOPs")
st.markdown(
    "Each parameter is used once per token in the forward pass, for a multiplication and an addition: 2 FLOPs. "
    "The backward pass costs about twice the forward pass. Training N parameters on D tokens and generating one "
    "token therefore cost about")
st.latex(r"C_{\text{train}} \approx 6ND, \qquad C_{\text{token}} \approx 2N")
g = cost.gpt3_example()
st.markdown(f"**Worked example, GPT-3.** Its N is the count above for the GPT-3 preset with the output map tied to the "
            f"embedding, as GPT-3 does; it was trained on D = {g['D'] / 1e9:.0f} billion tokens.")
st.latex(rf"6ND = 6 \cdot {fmt.latex_sci(g['N'], 4)} \cdot {fmt.latex_sci(g['D'])} \approx {fmt.latex_sci(g['C'])} "
         rf"\text{{ FLOPs}}, \qquad 2N \approx {fmt.latex_sci(g['per_token'])} \text{{ FLOPs per token}}")
default_D = int(shipped_training.get("tokens_seen") or cost.GPT3_TRAINING_TOKENS)
D = st.number_input("training tokens D for the shape above", min_value=1, max_value=10**15, value=default_D,
                    step=1_000_000, key="par_tokens", format="%d")
N = counts["total"]
f1, f2, f3 = st.columns(3)
f1.metric("Training, 6ND", fmt.pretty_sci(cost.training_flops(N, D)) + " FLOPs")
f2.metric("Generating one token, 2N", fmt.pretty_sci(cost.inference_flops_per_token(N)) + " FLOPs")
f3.metric(f"plus attention at n = n_ctx = {c.n_ctx:,}", fmt.pretty_sci(cost.attention_flops_per_token(config, c.n_ctx)) + " FLOPs",
          help="4·L·n·d: the new token's scores and weighted sum over n cached keys and values, which 2N leaves out")
wall = shipped_training.get("wall_time_s")
if shipped is not None and shipped_training.get("tokens_seen") and wall:
    C = cost.training_flops(count_parameters(shipped)["total"], shipped_training["tokens_seen"])
    st.caption(f"The shipped model saw {shipped_training['tokens_seen']:,} tokens in {wall:,.0f} s of training: "
               f"6ND = {fmt.pretty_sci(C)} FLOPs, about {C / wall / 1e9:.0f} GFLOP/s on the machine that trained it.")
