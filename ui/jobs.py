"""Background jobs and uploads: a job's Pause/Resume/Stop, where a queued job stands, the heartbeat that keeps a job
of an open tab alive (core.jobs.runner), saving a trained run, the corpus fetch button, the upload cap, the owner
id."""
from __future__ import annotations

import secrets

import streamlit as st

from core.data import corpus
from core.jobs.runner import heartbeat_s
from core.training import fetch, model_export
from core.serve.paths import user_models_dir
from ui.models import shipped_names


def session_owner() -> str:
    """This browser session's identity: a random id kept for the session (no login). A saved model records
    it, so everyone sees every model but only its owner may replace it."""
    return st.session_state.setdefault("te_owner", secrets.token_hex(8))


def upload_limit_mb() -> int:
    """The server's upload cap in MiB (``server.maxUploadSize``, set once in .streamlit/config.toml)."""
    return int(st.get_option("server.maxUploadSize"))


def offer_shakespeare_fetch(key: str) -> bool:
    """Where Tiny Shakespeare was looked for, where to put it by hand, and a button that fetches it: from its
    public source, on this click only, checked against its SHA-256 and saved in the corpora folder beside the
    models (core.training.fetch). True once it is saved: the caller reruns, and shakespeare_path() finds it from then
    on. Any failure is shown with the same where-to-put-it advice."""
    # the corpus module's functions looked up at each click, not bound at import: tests point them elsewhere
    source, dest = fetch.SHAKESPEARE, corpus.fetched_shakespeare_path()
    by_hand = (f"save {source.url} as `{dest}` yourself, or set the {corpus.CORPUS_ENV} environment variable to the "
               "file's path")
    looked = " and ".join(f"`{p}`" for p in corpus.shakespeare_candidates())
    st.caption(f"{source.name} was not found (looked for {looked}). Fetch it with the button, or {by_hand}.")
    if not st.button(f"Fetch {source.name} ({source.size_label})", key=key, icon=":material/download:",
                     help=f"Downloads {source.url} once, checks its SHA-256 and saves it in {dest.parent}."):
        return False
    with st.spinner(f"Fetching {source.name} ..."):
        try:
            fetch.fetch_corpus(source.url, dest, source.sha256, timeout=60, max_bytes=source.size)
        except fetch.FetchError as e:
            st.error(f"{source.name} could not be fetched: {e}. Instead, {by_hand}.", icon="⚠️")
            return False
    return True


def keep_alive(job) -> None:
    """Touch ``job`` now and, while this tab is open, every third of the heartbeat (core.jobs.runner.heartbeat_s):
    a job a page stops touching is abandoned, and a paused or queued job's page does not otherwise rerun."""
    if job is None:
        return
    job.touch()
    st.fragment(run_every=max(1.0, heartbeat_s() / 3))(job.touch)()


def job_controls(job, s, polling: bool, prefix: str, resume_help: str | None = None,
                 stop_help: str | None = None) -> None:
    """Pause, Resume and Stop for a background job (a training run, a study) whose status is ``s``, and where it
    stands while it waits for the server's cores; each click reruns the page. Also reruns when the job started,
    paused or ended between two polls, so that the controls and the polling match its state. A resume never
    fails for a full server: the job waits in line."""
    job.touch()
    if s.state == "queued":
        st.info(s.queue_words, icon=":material/hourglass_top:")
    b1, b2, b3, _ = st.columns([1, 1, 1, 4])
    if b1.button("Pause", key=f"{prefix}_pause", disabled=not s.can_pause):
        job.pause()
        st.rerun()
    if b2.button("Resume", key=f"{prefix}_resume", disabled=not s.can_resume, help=resume_help):
        job.resume()
        st.rerun()
    if b3.button("Stop", key=f"{prefix}_stop", disabled=not s.can_stop, help=stop_help):
        job.stop(wait=None)  # the worker ends what is under way; the polling shows when it has
        st.rerun()
    if s.moving != polling:  # the page polls only while the job moves: rerun so that it starts or stops polling
        st.rerun()


def save_form(prefix: str, name_key: str) -> None:
    """Save the run of ``st.session_state[f"{prefix}_job"]`` (a paused, stopped or finished core.training.training_job): a
    name box, two ticks (replace a model of mine, select it in the sidebar), the Save button, then what the save
    said and the downloads of what it saved. ``name_key``: the name box's key, written out by the page (tests find
    text boxes by the keys in the pages' source); every other key starts with ``prefix``. A new run starts the
    form afresh (``reset_save_form``)."""
    def save():  # a button callback runs before the next script run, so it may still set the sidebar's selection
        saved, error = model_export.save_run(
            st.session_state[f"{prefix}_job"], user_models_dir(), st.session_state.get(name_key, ""),
            protected=shipped_names(), overwrite=st.session_state.get(f"{prefix}_overwrite", False),
            owner=session_owner())
        st.session_state.update({f"{prefix}_saved": saved, f"{prefix}_save_error": error})
        if saved and st.session_state.get(f"{prefix}_select", True):
            st.session_state["te_model_name"] = saved["name"]  # the sidebar's model picker (app.py)

    name = st.text_input("Name", key=name_key, max_chars=100, persist_state="session",
                         help="Letters, digits, '-', '_' and '.'; anything else becomes '-'.")
    if note := model_export.name_note(name):
        st.caption(note)
    c1, c2 = st.columns(2)
    c1.checkbox("Replace a model of mine with this name", key=f"{prefix}_overwrite", persist_state="session",
                help="Only a model saved from this browser session can be replaced; other people's models never are.")
    c2.checkbox("Select it in the sidebar after saving", value=True, key=f"{prefix}_select", persist_state="session")
    st.button("Save the model", type="primary", key=f"{prefix}_save", on_click=save)
    if st.session_state.get(f"{prefix}_save_error"):
        st.error(f"Not saved: {st.session_state[f'{prefix}_save_error']}")
    if saved := st.session_state.get(f"{prefix}_saved"):
        st.success(f"Saved **{saved['name']}** (step {saved['step']:,}) in {user_models_dir()}. It is in the sidebar's "
                   "model picker now; open Home to read its model card and loss curve.")
        for col, (kind, label, data, file_name, help) in zip(st.columns([1, 1, 2]), model_export.downloads(saved)):
            col.download_button(label, data=data, file_name=file_name, mime="application/zip",
                                key=f"{prefix}_download{kind}", on_click="ignore", help=help)


def reset_save_form(prefix: str, name_key: str, name: str) -> None:
    """A new run in ``save_form(prefix, name_key)``: nothing saved or refused yet, and ``name`` in its name box."""
    st.session_state.update({f"{prefix}_saved": None, f"{prefix}_save_error": None, name_key: name})
