"""The Lesson's null controls (issue 59 §2) on step 12's claim, the earlier head whose path into the induction head's
keys restores most (core.analysis.null_controls.path_patching, on the step's own prompt pair and measure)."""
from __future__ import annotations

from core.analysis import null_controls as NC
from core.analysis.patching import Metric, default_answers
from core.analysis.timing import forward_seconds
from ui.caching import model_cache
from ui.lesson_context import WHAT
from ui.null_controls import controls_asked, show_control


def circuit_controls(model, mkey: str, q):
    """Behind a button, once step 12 is revealed: its path claim on a random twin and on random answer tokens."""
    if "head" not in q.data:
        return
    clean, bad, head = q.data["clean"], q.data["corrupt"], q.data["head"]
    # the twin's two runs and its paths' two passes, two passes per random pair: passes of every earlier head's rows
    rows = head[0] * model.config.n_heads
    est = (4 + 2 * NC.NONSENSE_DRAWS) * model_cache(lambda r, n: forward_seconds(model, r, n), 8)(mkey, rows, len(clean))
    if not controls_asked(("lesson_controls", mkey, clean, bad, head), est, "lesson_controls_btn", "the path claim"):
        return

    def control(clean, bad, head):
        metric = Metric(*default_answers(model, list(clean), list(bad)))  # the step's measure (pair_steps)
        return NC.path_patching(model, clean, bad, head, metric)
    show_control(model_cache(control, 16, what=WHAT)(mkey, clean, bad, head), "lesson_ctl")
