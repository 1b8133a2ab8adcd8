"""Transformer Explorer: the frame. Shared sidebar (model picker) and the router over pages/."""
import streamlit as st
import torch

from core.checkpoint import CheckpointError
from ui import (DEFAULT_MODEL, PAGE_THREADS, load_model, resume_deep_link, scan_models, show_page_menu,
                user_models_dir)

# every script run happens on a fresh thread, which starts with the process-wide default thread count;
# a training run elsewhere may have changed that default, so each page run sets its own
torch.set_num_threads(PAGE_THREADS)

st.set_page_config(page_title="Transformer Explorer", page_icon="🔎", layout="wide")

PAGES = [
    st.Page("pages/home.py", title="Home", icon=":material/home:", default=True),
    st.Page("pages/attention.py", title="Attention", icon=":material/grid_on:"),
    st.Page("pages/generation.py", title="Generation", icon=":material/edit_note:"),
    st.Page("pages/training.py", title="Training", icon=":material/model_training:"),
    st.Page("pages/parameters.py", title="Parameters and cost", icon=":material/calculate:"),
    st.Page("pages/scaling.py", title="Scaling laws", icon=":material/trending_down:"),
]

show_page_menu()  # config.toml hides Streamlit's pages/ folder menu; ours is shown
nav = st.navigation(PAGES)
resume_deep_link()  # a bookmark opened before app.py had run: back to that page, in the frame

with st.sidebar:
    st.markdown("### Model")
    good, bad = scan_models()
    if good:
        names = [e.name for e in good]
        default = names.index(DEFAULT_MODEL) if DEFAULT_MODEL in names else 0
        name = st.selectbox("Model", names, index=default, key="te_model_name", label_visibility="collapsed",
                            format_func=lambda n: n + ("" if next(e for e in good if e.name == n).shipped else " (yours)"),
                            help=f"Shipped models live in assets/models; models you train are saved in {user_models_dir()}.")
        entry = next(e for e in good if e.name == name)
        try:
            model, tok = load_model(entry)
        except CheckpointError as e:  # its header was fine but its weights are not (NaN, say)
            st.session_state["te_current"] = (None, None, None)
            st.error(f"**{entry.name}** could not be loaded: {e}", icon="⚠️")
        else:
            st.session_state["te_current"] = (entry, model, tok)
            c = model.config
            st.caption(f"d={c.d_model} · h={c.n_heads} · L={c.n_layers} · n_ctx={c.n_ctx} · m={c.vocab_size}")
    else:
        st.session_state["te_current"] = (None, None, None)
        st.error("No model could be loaded. Check assets/models or train one on the Training page.")
    for entry in bad:
        st.warning(f"**{entry.name}** could not be loaded: {entry.error}", icon="⚠️")

nav.run()
