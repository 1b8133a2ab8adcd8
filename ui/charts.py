"""Drawing figures: st.plotly_chart without Streamlit's deep copy, figure caches shared by every session, and rows
of numbers (st.metric) that core computed."""
from __future__ import annotations

import threading

import plotly.graph_objects as go
import streamlit as st
from _plotly_utils.utils import convert_to_base64


class _Encoded(go.Figure):
    """A figure already in the form st.plotly_chart encodes (BaseFigure.to_dict's: arrays as base64 typed arrays,
    plain dicts and lists). st.plotly_chart asks a figure for ``to_dict()``, which deep-copies every value, arrays
    included, before converting them; this one hands over the finished dict. The JSON sent is the same text
    (tests/test_shared_chart.py)."""

    def __init__(self, spec: dict):
        super().__init__()
        self._te_spec = spec

    def to_dict(self):
        return self._te_spec


def _containers(obj):
    """New dicts and lists all the way down, the values in them shared (arrays are not copied)."""
    if isinstance(obj, dict):
        return {k: _containers(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_containers(v) for v in obj]
    return obj


def encoded(fig: go.Figure) -> _Encoded:
    """``fig`` as BaseFigure.to_dict gives it, without copying its arrays: new containers, then Plotly's own
    conversion of arrays to base64 (which writes into the containers, never into the figure)."""
    spec = {"data": _containers(fig._data), "layout": _containers(fig._layout)}
    frames = [f._props for f in fig._frame_objs]
    if frames:  # to_dict leaves "frames" out when there are none: so do we, for the same JSON
        spec["frames"] = _containers(frames)
    convert_to_base64(spec)
    return _Encoded(spec)


def chart(fig, where=None, **kwargs):
    """st.plotly_chart (in the container ``where``, default the page), sending ``fig`` without the deep copy
    Streamlit makes of it (``encoded``)."""
    return (where or st).plotly_chart(encoded(fig) if isinstance(fig, go.Figure) else fig, **kwargs)


_FIGURE_CACHES: dict = {}  # builder -> its st.cache_resource wrapper, made once per process (see cached_figure)
_FIGURE_CACHES_LOCK = threading.Lock()


def cached_figure(builder):
    """``builder`` (a core figure function) behind one st.cache_resource for the server: a rerun with the same
    inputs gets the same figure object (cache_data would pickle it, and unpickling a Plotly figure validates it
    again). The wrapper is made once per process: Streamlit reads a function's source to name its cache whenever
    a wrapper is made, which a page doing it at its top paid on every run (about 2 ms a function)."""
    with _FIGURE_CACHES_LOCK:
        if builder not in _FIGURE_CACHES:
            _FIGURE_CACHES[builder] = st.cache_resource(builder, max_entries=32, show_spinner=False)
        return _FIGURE_CACHES[builder]


def shared_chart(fig, **kwargs):
    """``chart`` for a figure from one of the pages' figure caches (st.cache_resource: one object, shared by every
    session and never changed): its encoded form is kept with it, so a class opening the Attention page encodes
    each figure once, not once per student. Never for a figure that is changed after it is drawn."""
    enc = getattr(fig, "_te_encoded", None)
    if enc is None:  # first session to draw this cached figure: later ones reuse the encoding
        enc = fig._te_encoded = encoded(fig)
    return st.plotly_chart(enc, **kwargs)


def metric_row(rows, n: int) -> None:
    """One st.metric per (label, value, help) of ``rows`` (core builds them, the page only draws), side by side in
    ``n`` equal columns: rows drawn with the same ``n`` line up under each other."""
    for col, (label, value, help) in zip(st.columns(n), rows):
        col.metric(label, value, help=help)
