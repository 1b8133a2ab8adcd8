"""Transformer Explorer: the frame. Shared sidebar (model picker) and the router over pages/."""
import streamlit as st

from core.nn.checkpoint import CheckpointError
from core.serve.fmt import md_escape
from core.serve.threads import page_threads, use_threads
from ui.links import frame_link, show_frame_link_ignored
from ui import (DEFAULT_MODEL, accept_lone_surrogates, at_step, load_model, model_label, release_compute_slot,
                resume_deep_link, scan_models, session_owner, show_page_menu, step_picker)
from core.serve.paths import user_models_dir

# every script run happens on a fresh thread, which starts with the process-wide default thread count;
# a training run elsewhere may have changed that default, so each page run sets its own
use_threads(page_threads())
accept_lone_surrogates()  # a lone surrogate typed into a box must not close the socket (see ui/prompts.py)

st.set_page_config(page_title="Transformer Explorer", page_icon="🔎", layout="wide")

PAGES = {  # sections, so that a newcomer sees where to start and what belongs together
    "Start here": [
        st.Page("pages/lesson.py", title="Lesson", icon=":material/school:"),
        st.Page("pages/home.py", title="Home", icon=":material/home:", default=True),
        st.Page("pages/classroom.py", title="Class", icon=":material/groups:"),
    ],
    "One prompt, inside the model": [
        st.Page("pages/attention.py", title="Attention", icon=":material/grid_on:"),
        st.Page("pages/heads.py", title="Switch heads off", icon=":material/power_settings_new:"),
        st.Page("pages/inside.py", title="Inside the model", icon=":material/account_tree:"),
        st.Page("pages/features.py", title="Features", icon=":material/lightbulb:"),
        st.Page("pages/generation.py", title="Generation", icon=":material/edit_note:"),
        st.Page("pages/cause_effect.py", title="Cause and effect", icon=":material/swap_horiz:"),
        st.Page("pages/attribution.py", title="Attribution graph", icon=":material/hub:"),
    ],
    "How it was learned": [
        st.Page("pages/over_training.py", title="Over training", icon=":material/history:"),
        st.Page("pages/training.py", title="Training", icon=":material/model_training:"),
        st.Page("pages/variants.py", title="Why each piece", icon=":material/extension:"),
    ],
    "Cost and scale": [
        st.Page("pages/parameters.py", title="Parameters and cost", icon=":material/calculate:"),
        st.Page("pages/scaling.py", title="Scaling laws", icon=":material/trending_down:"),
        st.Page("pages/scaling_fit.py", title="Your scaling law", icon=":material/scatter_plot:"),
    ],
}

MAX_SHOWN_BAD = 50  # broken model folders listed by name in the sidebar

show_page_menu()  # config.toml hides Streamlit's pages/ folder menu; ours is shown
nav = st.navigation(PAGES, expanded=True)  # every page listed: none hidden behind "View more"
resume_deep_link()  # a bookmark opened before app.py had run: back to that page, in the frame

with st.sidebar:
    st.markdown("### Model")
    good, bad = scan_models()
    if good:
        names = [e.name for e in good]
        me = session_owner()  # this browser session's id: the owner recorded in the models it saves
        labels = {e.name: model_label(e, me) for e in good}  # yours or a classmate's, decided in this run
        frame_link(names)  # a link's model= and step=, read once (ui.links)
        if st.session_state.get("te_model_name") not in names:  # the default, as state: a link may set it
            st.session_state["te_model_name"] = DEFAULT_MODEL if DEFAULT_MODEL in names else names[0]
        name = st.selectbox("Model", names, key="te_model_name", label_visibility="collapsed",
                            format_func=labels.get,
                            help=f"Shipped models live in assets/models; models trained here are saved in "
                                 f"{user_models_dir()}, where everyone on this server sees them (a class gallery). "
                                 "Only the browser session that saved a model may replace it.")
        entry = step_picker(next(e for e in good if e.name == name))
        try:
            try:
                model, tok = load_model(entry)
            except CheckpointError as e:
                if entry.step is None:
                    raise
                # a missing or corrupt snapshot: named, and the pages go on with the final weights
                st.warning(f"The snapshot of step {entry.step:,} could not be loaded ({e.shown}); the pages show "
                           "the final model instead.", icon="⚠️")
                entry = at_step(entry, None)
                model, tok = load_model(entry)
        except CheckpointError as e:  # its header was fine but its weights are not (NaN, say)
            st.session_state["te_current"] = (None, None, None)
            st.error(f"**{entry.name}** could not be loaded: {e.shown}", icon="⚠️")
        except Exception as e:  # noqa: BLE001 - out of memory, say: this model fails, the app goes on
            st.session_state["te_current"] = (None, None, None)
            st.error(f"**{entry.name}** could not be loaded ({type(e).__name__}). Pick another model.", icon="⚠️")
        else:
            st.session_state["te_current"] = (entry, model, tok)
            c = model.config
            st.caption(f"d={c.d_model} · h={c.n_heads} · L={c.n_layers} · n_ctx={c.n_ctx} · m={c.vocab_size}")
    else:
        st.session_state["te_current"] = (None, None, None)
        st.error("No model could be loaded. Check assets/models or train one on the Training page.")
    if bad:  # one line for all of them: a folder of 1,000 broken models must not bury the picker
        with st.expander(f"{len(bad)} model{'s' if len(bad) != 1 else ''} could not be loaded", icon="⚠️"):
            for entry in bad[:MAX_SHOWN_BAD]:
                st.markdown(f"- **{md_escape(entry.name)}**: {md_escape(entry.error or '')}")
            if len(bad) > MAX_SHOWN_BAD:
                st.caption(f"... and {len(bad) - MAX_SHOWN_BAD:,} more.")

show_frame_link_ignored()  # what a link's model= or step= could not use, named once above the page
try:
    nav.run()
finally:  # a page that waited for a compute slot (ui.compute_slot) holds it until here, however its run ended
    release_compute_slot()
