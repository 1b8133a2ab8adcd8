"""The Attribution graph page's null control (issue 59 §2): its claim, the strongest edge into the explained output,
checked by the same graph built for a random output the model did not predict (core.analysis.null_controls.graph_edge).
A random twin has no transcoders, so it cannot be graded here: the verdict says so."""
from __future__ import annotations

from core.analysis import null_controls as NC
from ui.caching import model_cache
from ui.null_controls import controls_asked, show_control


def controls_section(graph_of, mkey: str, ids: tuple, token, at: tuple, vocab_size: int, label, seconds: float):
    """Behind a button: ``graph_of`` (the page's cached graph, ``graph_of(mkey, ids, tokens, cap, batch)``) for a
    random target beside the explained one (``token``: None for the top output); ``label(graph, node)`` in words;
    ``seconds``: the page's estimate of one graph."""
    if not controls_asked(("attr_controls", mkey, ids, token, at), seconds, "attr_controls_btn",
                          "the strongest edge into the output"):
        return

    def control(ids, token, cap, batch):
        g = graph_of(mkey, ids, token, cap, batch)
        return NC.graph_edge(lambda t: graph_of(mkey, ids, t, cap, batch), g, vocab_size, lambda i: label(g, i))
    show_control(model_cache(control, 8, what="the null controls", spinner="Tracing a random output ...")(
        mkey, ids, token, *at), "attr_ctl")
