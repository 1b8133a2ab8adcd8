"""The Features page's background work: training an SAE on the picked model (``training_panel``) and following its
features through training (``forming_panel``). Both are jobs of core.features.job, one per session; this module
draws their forms, progress and results and hands a trained SAE to ui.saes. Nothing here computes."""
from __future__ import annotations

import streamlit as st

from core.features import forming
from core.analysis.sae import MAX_D_SAE, sae_folder, save_sae
from core.features.explanations import write_explanations
from core.analysis.sites import Site, site_words, sites
from core.features.job import MAX_STEPS, SAEJob, check_settings
from core.features.train import DEFAULT_K, EXPANSION, SAESettings
from core.nn.precision import run_precision
from pages.features.forming import forming_figure, forming_rows
from core.nn.snapshots import checkpoint_steps
from core.jobs import JobBusy, about
from ui.charts import chart
from ui.compute import session_alive, session_id
from ui.jobs import session_owner
from ui.features import form_estimate, sae_pace
from ui.explanations import keep_session
from ui.saes import add_session_sae

JOB_KEY = "te_sae_job"         # {"job", "kind" ("train" or "forming"), "path", "entry", "label", "done"}
FORMING_KEY = "te_forming"     # {(model path, SAE label): Forming} of studies this session finished
POLL_S = 1.0                   # seconds between two looks at a running job
DEFAULT_SITE = "blocks.0.hook_resid_post"
DEFAULT_STEPS = 1_000


def _record():
    return st.session_state.get(JOB_KEY)


def _start(make, kind: str, entry, label: str = ""):
    try:
        job = make().watch(session_id(), session_alive).start()
    except (JobBusy, ValueError) as e:
        st.error(str(e), icon="⚠️")
        return
    st.session_state[JOB_KEY] = {"job": job, "kind": kind, "path": str(entry.path), "entry": entry, "label": label,
                                 "done": False}
    st.rerun()


def _other_job_note(kind: str, entry) -> bool:
    """True (and a note) when this session's job is another kind's, or another model's, and still runs."""
    rec = _record()
    if rec is None or (rec["kind"] == kind and rec["path"] == str(entry.path)):
        return False
    if rec["job"].status().active:
        st.info(f"You are {rec['job'].what} (model {rec['entry'].name}); one SAE job at a time, so this one can "
                "start when it has ended.", icon=":material/hourglass_top:")
        return True
    return False


def _live(kind: str, polling: bool):
    """The job's progress and Stop; reruns the whole page when it ends (and hands its result over once)."""
    rec = _record()
    job = rec["job"]
    job.touch()  # a job this tab stops touching is stopped (core.jobs.runner)
    s = job.status()
    st.progress(s.fraction, text=s.words)
    if st.button("Stop", key=f"te_sae_{kind}_stop", disabled=not s.can_stop,
                 help="Ends the job after the step under way; what it trained is discarded."):
        job.stop()
        st.rerun(scope="app")
    if s.state == "finished" and not rec["done"]:
        rec["done"] = True
        if kind == "train":
            keep_session(job.result.sae, job.explanations)  # its words on the page, before it is ever saved
            add_session_sae(rec["entry"], job.result.sae, job.result.metrics)
        else:
            st.session_state.setdefault(FORMING_KEY, {})[(rec["path"], rec["label"])] = job.result
        st.rerun(scope="app")
    if s.active != polling:  # started, or ended between two polls: rerun so that the polling matches
        st.rerun(scope="app")


def _progress(kind: str, entry) -> None:
    rec = _record()
    if rec is None or rec["kind"] != kind or rec["path"] != str(entry.path):
        return
    s = rec["job"].status()
    if s.state == "stopped":
        st.caption("Stopped: nothing was kept.")
    elif s.state == "failed":
        st.error(f"The job failed: {s.message}")
    if s.active or s.state == "finished":
        polling = s.active  # a queued or paused job too: each poll is the heartbeat that keeps it alive
        st.fragment(run_every=POLL_S if polling else None)(_live)(kind, polling)


# ------------------------------------------------------------------ training an SAE
def _training_form(model):
    names = sites(model.config)
    c1, c2, c3, c4 = st.columns(4)
    name = c1.selectbox("Site", names, index=names.index(DEFAULT_SITE) if DEFAULT_SITE in names else 0,
                        key="te_sae_site", help="Where in the forward pass the SAE reads its activations.")
    site = Site.of(model.config, name)  # checked once here; everything below takes it as it is
    width = site.width
    d_sae = c2.number_input("Latents", 1, MAX_D_SAE, min(MAX_D_SAE, EXPANSION * width), step=64, key="te_sae_latents",
                            help=f"The SAE's dictionary size; {EXPANSION}× the site's width ({width}) by default.")
    k = c3.number_input("k (active per token)", 1, 256, DEFAULT_K, key="te_sae_k",
                        help="TopK keeps this many latents per token, every other one exactly 0.")
    steps = c4.number_input("Steps", 50, MAX_STEPS, DEFAULT_STEPS, step=250, key="te_sae_steps",
                            help="Optimiser steps of 2,048 activations each.")
    return site, SAESettings(d_sae=int(d_sae), k=int(k), steps=int(steps), precision=run_precision())  # bf16 if faster


def training_panel(entry, model, tok, training) -> None:
    """Train an SAE on the picked model in the background: the form, its memory and time estimates, Start and
    Stop, the live progress; a finished SAE joins this session's SAEs (ui.saes) and the page reruns."""
    site, settings = _training_form(model)
    st.caption(f"It reads {site_words(site)}.")
    try:
        check_settings(model.config, site, settings)
    except ValueError as e:
        st.error(str(e))
        return
    problem = form_estimate(model, site, settings, training)  # said on the page; None when it may start
    busy = _other_job_note("train", entry)
    rec = _record()
    running = rec is not None and rec["job"].status().active
    if st.button("Train the SAE", type="primary", key="te_sae_start", disabled=bool(problem) or busy or running,
                 help="Starts in the background; the page stays usable meanwhile."):
        _start(lambda: SAEJob(model, tok, site, training, settings, owner=session_owner()), "train", entry)
    _progress("train", entry)
    _offer_save(entry)


def _offer_save(entry) -> None:
    """Save the SAE this session just trained beside the model, when the model is this session's own."""
    rec = _record()
    if rec is None or rec["kind"] != "train" or rec["path"] != str(entry.path) or rec["job"].result is None:
        return
    if entry.shipped or getattr(entry, "hf", False) or entry.owner != session_owner():
        st.caption("It is kept for this session. Only a model you saved yourself can keep an SAE beside it.")
        return
    if entry.step is not None:  # sae/<site> beside a model describes its final weights
        st.caption(f"It is kept for this session: it read the model at step {entry.step:,}, and an SAE saved beside "
                   "the model must describe its final weights.")
        return
    trained = rec["job"].result
    folder = sae_folder(entry.path, trained.sae.site)
    if st.button(f"Save it beside your model (sae/{trained.sae.site})", key="te_sae_save",
                 help="Replaces an SAE saved there before."):
        try:
            save_sae(trained.sae, folder, trained.metrics)
            write_explanations(folder, rec["job"].explanations)
        except OSError as e:
            st.error(f"Not saved: {e.strerror or e}")
        else:
            st.success(f"Saved in {folder}.")


# ------------------------------------------------------------------ features forming
def forming_panel(entry, model, choice) -> None:
    """Follow the features of ``choice`` (a ui.saes.SAEChoice) through the model's training snapshots: Start,
    progress, then the figure and a table of each top feature's formation step."""
    kept = checkpoint_steps(entry.path)
    trained = [s for s in kept if s > 0]
    if len(trained) < 2:
        st.info("This model kept no training snapshots, so there is nothing to follow its features through. Models "
                "trained on the Training page keep about twenty.", icon=":material/history:")
        return
    c1, c2 = st.columns(2)
    top = min(len(trained), 12)
    if top > forming.MIN_STEPS:
        n_steps = c1.slider("Snapshots", forming.MIN_STEPS, top, forming.MIN_STEPS, key="te_forming_steps",
                            help="An SAE is trained at each; more of them draw a finer curve.")
    else:  # no choice to make: every snapshot it kept
        n_steps = top
    n_top = c2.slider("Features followed", 3, 20, 10, key="te_forming_top",
                      help="The final SAE's most frequent features.")
    steps = forming.pick_steps(kept, n_steps)
    small = forming.small_settings(choice.sae)
    seconds = forming.forming_seconds(len(steps), small.steps,
                                      sae_pace(choice.sae.config.d_in, small))
    st.caption(f"A small SAE ({small.steps} steps) at steps {', '.join(f'{s:,}' for s in steps)}, and a second seed "
               f"at the last: {len(steps) + 1} SAEs, {about(seconds)} here.")
    busy = _other_job_note("forming", entry)
    rec = _record()
    running = rec is not None and rec["job"].status().active
    if st.button("Follow the features", type="primary", key="te_forming_start", disabled=busy or running):
        _start(lambda: forming.forming_job(entry.path, choice.sae, model.config, steps, n_top, owner=session_owner()),
               "forming", entry, choice.label)
    _progress("forming", entry)
    result = st.session_state.get(FORMING_KEY, {}).get((str(entry.path), choice.label))
    if result is not None:
        _forming_result(result)


def _forming_result(r) -> None:
    chart(forming_figure(r), width="stretch", key="te_forming_fig")
    st.dataframe(forming_rows(r), hide_index=True)
    gap = float(r.seed_gap.mean())
    st.caption(f"How much to trust a step: a second SAE at step {r.steps[-1]:,} with another seed moves a feature's "
               f"cosine by {gap:.2f} on average (the open circles), and a random direction's best match is "
               f"{r.chance:.2f}. A feature whose curve hovers near 0.7 may be called formed a snapshot early or late.")
