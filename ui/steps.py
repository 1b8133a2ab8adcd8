"""A model's training steps on screen: the snapshots a folder kept (a bounded listing), the sidebar's step slider,
a link's step=, and the words for a snapshot; ``require_model`` (an analysis page's first call) says which step it
shows."""
from __future__ import annotations

import streamlit as st

from core.nn.model_discovery import ModelEntry
from core.nn.model_card import read_training
from core.nn.snapshots import MAX_NAMES, Listing, snapshot_listing, snapshot_losses
from ui.models import at_step, current, load_model


def snapshot_steps_of(entry: ModelEntry) -> list[int]:
    """The steps ``entry`` kept snapshots of ([] for none: older saves, GPT-2 folders)."""
    return list(snapshot_listing_of(entry).steps)


def snapshot_listing_of(entry: ModelEntry) -> Listing:
    """``entry``'s snapshot steps and whether its folder held too many names to list them all (core.nn.snapshots:
    a bounded listing, kept while the folder does not change)."""
    return Listing() if entry.hf else snapshot_listing(entry.path)


def snapshot_loader(entry: ModelEntry, step: int):
    """A loader of ``entry``'s model at ``step`` (no argument; raises CheckpointError), for work that reads its
    snapshots one at a time (core.analysis.over_training): through the step caches, nothing loaded before it runs."""
    return lambda: load_model(at_step(entry, step))[0]


def listing_words(listing: Listing) -> str | None:
    """One sentence when the snapshot folder held more names than are read; None otherwise."""
    if not listing.truncated:
        return None
    return (f"Its snapshot folder holds more than {MAX_NAMES:,} files: only the first {MAX_NAMES:,} names read are "
            "listed, so some snapshots may be missing from the steps offered.")


def final_step(entry: ModelEntry) -> int | None:
    """The step the final weights were saved at (the training record's step count); None when unknown."""
    steps = read_training(entry.path).get("steps")
    return steps if isinstance(steps, int) and not isinstance(steps, bool) else None


def step_picker(entry: ModelEntry) -> ModelEntry:
    """The sidebar's "Model at training step": a slider over the snapshots ``entry`` kept, the final model by
    default. Returns the entry at the chosen step (step None for the final weights)."""
    listing, last = snapshot_listing_of(entry), final_step(entry)
    steps = list(listing.steps)
    if not steps:
        return at_step(entry, None)
    # the last snapshot is the final step, stored in float16: the final weights stand for it
    options = [s for s in steps if s != last] + ["final"]
    label = lambda o: f"final (step {last:,})" if o == "final" and last is not None else (  # noqa: E731
        "final" if o == "final" else f"{o:,}")
    key = f"te_step::{entry.name}"
    pending = st.session_state.pop("te_link_step", None)  # a link's step= (ui.links.frame_link), once
    if pending is not None:
        choice, words = link_step(pending, steps, last, entry.name)
        if choice is None:
            st.session_state.setdefault("te_link_ignored", []).append(("step", words))
        else:
            st.session_state[key] = choice
            if words:
                st.info(words, icon=":material/history:")
    if st.session_state.get(key) not in options:  # the default (set here, not as value=, so a link may set it)
        st.session_state[key] = "final"
    choice = st.select_slider("Model at training step", options, format_func=label, key=key,
                              help="Every analysis page (Attention, Switch heads off, Inside the model, Generation) "
                                   "uses the model as it was at this step of its training. Drag left to step 0, the "
                                   "untrained model, and watch what it learns. The Over training page shows the "
                                   "snapshots side by side.")
    if (words := listing_words(listing)) is not None:
        st.caption(words)
    return at_step(entry, None if choice == "final" else choice)


def link_step(step: int, steps: list[int], last: int | None, name: str) -> tuple:
    """(the step picker's option for a link's ``step=``, words or None): the final step is "final" (the final weights
    stand for its snapshot); a kept step is itself; a step between snapshots opens the nearest one (the earlier on a
    tie) and says which; a step past the end of training is refused in words: (None, why)."""
    if step == last:
        return "final", None
    if step in steps:
        return step, None
    if last is not None and step > last:
        return None, f"{name} trained for {last:,} steps: step {step:,} is past the end of its training"
    nearest = min(steps, key=lambda s: (abs(s - step), s))
    option = "final" if nearest == last else nearest
    shown = f"the final model (step {nearest:,})" if option == "final" else f"the nearest snapshot (step {nearest:,})"
    return option, (f"The link asked for step {step:,}, but {name} kept no snapshot at that step: "
                    f"{shown} is open instead.")


def step_words(entry: ModelEntry) -> str | None:
    """"the model at step 1,000 of 12,000 (validation loss 1.94 nats/char)" for a snapshot; None for final weights."""
    if entry.step is None:
        return None
    training = read_training(entry.path)
    last, loss = final_step(entry), snapshot_losses(training).get(entry.step, {}).get("val_loss")
    unit = training.get("loss_unit", "token")
    of = f" of {last:,}" if last else ""
    return (f"the model at training step {entry.step:,}{of}" +
            (f" (validation loss {loss:.3f} nats per {unit}, estimated when the snapshot was taken)" if loss else ""))


def require_model(why: str = "") -> tuple:
    """(entry, model, tokenizer) of the selected model, or stop the page with a message (``why`` says what
    the page would have shown)."""
    entry, model, tok = current()
    if model is None:
        st.info(f"No model is loaded{why}. Pick one in the sidebar (or see there why none could be loaded).")
        st.stop()
    words = step_words(entry)
    if words:  # every analysis page says, first, that it does not show the finished model
        st.info(f"This page shows **{words}**. Drag *Model at training step* in the sidebar to *final* for the "
                "trained model.", icon=":material/history:")
    return entry, model, tok
