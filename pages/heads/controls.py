"""Switch heads off's null controls (issue 59 §2): the ranking's claim, the head whose switching off raises the loss
most (on the second copy of a prompt written twice), checked by the same ranking on a random twin and on the prompt
shuffled (core.analysis.null_controls.head_ranking), cached for the server like the page's runs."""
from __future__ import annotations

from core.analysis import null_controls as NC
from ui.caching import model_cache
from ui.null_controls import controls_asked, show_control


def controls_section(model, mkey: str, ids: tuple, mode: str, period: int | None, rank_s: float):
    """Behind a button: the ranking run twice more, on the twin and on the shuffled prompt (about 2 x ``rank_s``,
    the ranking's own estimate)."""
    if not controls_asked(("heads_controls", mkey, ids, mode), 2 * rank_s, "heads_controls_btn", "the ranking's top head"):
        return
    show_control(model_cache(lambda ids, mode, period: NC.head_ranking(model, ids, mode, period), 16,
                             what="the null controls", spinner="Ranking the heads of a random twin and of the "
                             "shuffled prompt ...")(mkey, ids, mode, period), "heads_ctl")
