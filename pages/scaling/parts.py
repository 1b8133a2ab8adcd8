"""Two sections of the Scaling laws page (issue 45): a budget spent on a limited stock of unique text (Muennighoff et
al. 2023), and a model sized for its life in service, not only for its training (Sardana et al. 2024). Numbers and
sentences in core.views.scaling_use; figures in core.figures.forecast_figures."""
from __future__ import annotations

import streamlit as st

from core.analysis.scaling import R_STAR_D, R_STAR_N, ScalingLaw
from core.analysis.scaling_inference import DEFAULT_INFERENCE_TOKENS
from core.figures.forecast_figures import constrained_split_figure, inference_figure, stock_figure, unique_data_figure
from core.serve.fmt import human, pretty_sci, sci
from core.views import scaling_use as su
from ui.cached import famous_inference
from ui.charts import cached_figure, chart, shared_chart


def show_unique_data(law: ScalingLaw):
    st.subheader("When the text runs out")
    st.markdown(
        "The law above assumes every training token is fresh. Past a point there is no more fresh text to be had, "
        "and a run reads the same text again. Muennighoff et al. (2023) trained 400 models on repeated data: a token "
        "on its R-th repetition is worth a share of a fresh one that falls by a factor of e every "
        f"R* ≈ {R_STAR_D} repetitions, so about four passes are nearly as good as fresh text and little is gained "
        "past sixteen. Parameters beyond what the unique text can use (U_N, the optimal size for one pass) lose "
        f"their worth the same way, with R*_N ≈ {R_STAR_N}. The law's D and N become effective D′ and N′:")
    st.latex(r"D' = U_D + U_D R_D^{*}\left(1 - e^{-R_D/R_D^{*}}\right), \quad "
             r"N' = U_N + U_N R_N^{*}\left(1 - e^{-R_N/R_N^{*}}\right), \quad "
             r"R_D = \frac{D}{U_D} - 1, \; R_N = \frac{N}{U_N} - 1")
    u1, u2 = st.columns(2)
    unique = u1.select_slider("Unique text U (tokens)", su.UNIQUE_CHOICES, value=1e12, format_func=human,
                              key="scal_unique", help="How much distinct text there is to train on.")
    budget_c = u2.select_slider("Compute C (FLOPs)", su.COMPUTE_CHOICES, value=1e24, format_func=sci,
                                key="scal_unique_c")
    cons = su.constrained(law, budget_c, unique)
    k1, k2, k3, k4 = st.columns(4)
    k1.metric("Chinchilla's N", human(cons.N_plain), help="The plain law's optimum, as if fresh text never ran out")
    k2.metric("Chinchilla's passes over U", pretty_sci(cons.passes_plain))
    k3.metric("N for this stock", human(cons.N), help="The least L(N′, D′) on the budget line")
    k4.metric("Passes for this stock", pretty_sci(cons.passes))
    st.markdown(su.constrained_note(cons))
    chart(unique_data_figure(law, cons.N, unique), width="stretch", key="scal_fig_unique")
    st.caption(su.worth_caption())
    chart(constrained_split_figure(law, unique), width="stretch", key="scal_fig_split")
    st.caption(su.split_caption())
    shared_chart(cached_figure(stock_figure)(su.STOCKS), width="stretch", key="scal_fig_stock")
    st.caption(su.stock_caption())


def show_inference(law: ScalingLaw):
    st.subheader("Sized for use, not only for training")
    st.markdown(
        "Chinchilla's optimum minimises the cost of *training*. A model that is then served pays about 2N FLOPs for "
        "every token it reads or writes, for as long as it is used. Sardana et al. (2024) minimise the lifetime cost "
        "instead: for a target loss and an expected number of served tokens, the best model is smaller and trained "
        "on more tokens, and the more it serves the further it moves from Chinchilla's.")
    st.latex(r"\min_{N, D}\; 6ND + 2N D_{\mathrm{inf}} \quad \text{subject to} \quad L(N, D) = L_{\mathrm{target}}")
    t1, t2 = st.columns(2)
    target = t1.number_input("Target loss", min_value=float(round(law.E + 0.001, 3)), max_value=20.0,
                             value=max(su.target_default(law), round(law.E + 0.01, 3)), step=0.01,
                             format="%.3f", key="scal_target",
                             help="Nats per token; the default is what this law gives Chinchilla.")
    served = t2.select_slider("Tokens served over the model's life", su.INFERENCE_CHOICES,
                              value=DEFAULT_INFERENCE_TOKENS, format_func=lambda v: human(v) if v else "none",
                              key="scal_served",
                              help="Default: two trillion, about a billion requests of 2,000 tokens.")
    chin_size, best_size = su.sizing(law, target, served)
    j1, j2, j3, j4 = st.columns(4)
    j1.metric("Chinchilla's N for this loss", human(chin_size["N"]),
              help=f"{chin_size['tokens_per_param']:.0f} tokens per parameter")
    j2.metric("Inference-aware N", human(best_size["N"]),
              help=f"{best_size['tokens_per_param']:.0f} tokens per parameter")
    j3.metric("Its tokens per parameter", f"{best_size['tokens_per_param']:.0f}")
    j4.metric("Lifetime FLOPs", sci(best_size["total_flops"]))
    st.markdown(su.sizing_note(chin_size, best_size, served))
    chart(inference_figure(law, target, served, best_size, chin_size), width="stretch", key="scal_fig_inference")
    st.markdown(f"The famous models again, each at the loss this law predicts for it, with "
                f"{human(served) if served else 'no'} tokens served: the model of least lifetime cost for that loss, "
                "and how much more the real one costs over its life.")
    st.dataframe(famous_inference(law, served), hide_index=True, width="stretch", key="scal_famous_inference",
                 column_config={**{k: st.column_config.NumberColumn(format="%.1f") for k in ("D/N", "its D/N")},
                                "predicted loss": st.column_config.NumberColumn(format="%.3f"),
                                "lifetime cost / least": st.column_config.NumberColumn(format="%.2f×")})
