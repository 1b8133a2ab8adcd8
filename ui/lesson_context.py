"""What a Lesson step reads (core.lesson.Context) for the selected model and a prompt: the Lesson page and the Class
page ask the same questions of the same model, so they build it in one place."""
from __future__ import annotations

from core import lesson as LS
from core.analysis.induction import head_scores
from core.views.variants_view import read_study
from ui.caching import model_cache
from ui.frame import ROOT
from ui.models import at_step, load_model, model_key
from ui.steps import snapshot_steps_of

WHAT = "the lesson's runs"


def lesson_context(entry, model, tok, ids, seed: int = 0) -> LS.Context:
    """The Context of ``entry``'s ``model`` on the prompt ``ids``: its head scores (cached for the server, measured once
    per model), its snapshots, the shipped variant study, and the temperature step's ``seed``."""
    scores = model_cache(lambda: head_scores(model, tokenizer=tok), 8, what=WHAT,
                         spinner="Measuring every head on repeated random sequences ...")
    return LS.Context(model, tok, tuple(ids), scores(model_key(entry)), snapshots=tuple(snapshot_steps_of(entry)),
                      load_step=lambda s: load_model(at_step(entry, s)),
                      study=lambda: read_study(ROOT / "assets" / "variants"), seed=seed)
