"""UI glue shared by app.py and the pages; core/ never imports it. One concern a file:

    models.py   the model picker: discovery, cached loading, the model selected in the sidebar
    compute.py  the compute line (slots of the server's gates, skipped by cached work) and live sessions
    caching.py  page caches of work on a model, keyed by the model's key string and gated by the compute line
    frame.py    deep links: a page opened alone switches into app.py's frame; the repo's ROOT and PAGES_DIR
    prompts.py  prompt boxes, token ids written into them, the websocket's repair of lone surrogates
    charts.py   Plotly figures sent without Streamlit's deep copy, figure caches shared by every session, metric rows
    jobs.py     a background job's controls, saving a trained run, the corpus fetch button, the upload cap, the owner

Everything is re-exported here (``__all__``), so pages and tests write ``ui.X`` or ``from ui import X``. Each name (and the
module state it reads: locks, caches, SHIPPED_DIR) lives in one submodule: a test that monkeypatches what a
function looks up patches that submodule (``ui.models.SHIPPED_DIR``), not the package."""
import pandas  # noqa: F401  imported up front: Streamlit imports it lazily, and sessions racing on that
import streamlit  # noqa: F401  first import could see a half-initialised module (seen under classroom load)

from core.serve.threads import page_threads, use_threads
from ui.caching import model_cache
from ui.charts import _containers, _Encoded, _FIGURE_CACHES, _FIGURE_CACHES_LOCK, cached_figure, chart, encoded, \
    metric_row, shared_chart
from ui.compute import _computed, _GATED, _GATED_LOCK, _max_entries, approved, compute_gate, compute_slot, gated, in_steps, \
    release_compute_slot, session_alive, session_id, work_finished
from ui.frame import _calling_page, _DEEP_LINK, ensure_frame, PAGES_DIR, resume_deep_link, ROOT, show_page_menu
from ui.jobs import job_controls, keep_alive, offer_shakespeare_fetch, reset_save_form, save_form, session_owner, \
    upload_limit_mb
from ui.models import (_load, _load_step, _stamp, at_step, current, DEFAULT_MODEL, load_folder, load_model, model_key,
                       model_label, scan_models, shipped_config, shipped_names, SHIPPED_DIR)
from ui.steps import final_step, require_model, snapshot_steps_of, step_picker, step_words
from ui.prompts import _SURROGATE, _vocab_tag, accept_lone_surrogates, IDS_SUFFIX, prompt_ids_now, prompt_input, \
    REPLACED, repair_surrogates, set_prompt_ids

__all__ = ["model_cache", "_containers", "_Encoded", "_FIGURE_CACHES", "_FIGURE_CACHES_LOCK", "cached_figure", "chart",
           "encoded", "metric_row", "shared_chart", "_computed", "_GATED", "_GATED_LOCK", "_max_entries", "approved",
           "compute_gate", "compute_slot", "gated", "in_steps", "release_compute_slot", "session_alive", "session_id",
           "work_finished", "_calling_page", "_DEEP_LINK", "ensure_frame", "PAGES_DIR", "resume_deep_link", "ROOT",
           "show_page_menu", "job_controls", "keep_alive", "offer_shakespeare_fetch", "reset_save_form", "save_form",
           "session_owner", "upload_limit_mb", "_load", "_load_step", "_stamp", "at_step", "current", "DEFAULT_MODEL",
           "load_folder", "load_model", "model_key", "model_label", "require_model", "scan_models", "shipped_config",
           "shipped_names", "SHIPPED_DIR", "final_step", "snapshot_steps_of", "step_picker", "step_words",
           "_SURROGATE", "_vocab_tag", "accept_lone_surrogates", "IDS_SUFFIX", "prompt_ids_now", "prompt_input",
           "REPLACED", "repair_surrogates", "set_prompt_ids"]

use_threads(page_threads())  # see core.serve.threads: one thread per page run unless TE_TORCH_THREADS says otherwise
