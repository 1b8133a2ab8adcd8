"""AppTest of the Scaling laws page (the law itself): presets, sliders, budget, famous models, and the link on to
the fit page (tests/test_page_scaling_fit.py)."""
import json

import pytest

from core.analysis.scaling import CHINCHILLA, EPOCH_2024


@pytest.fixture
def scaling(open_page):
    """scaling(): the scaling-laws page, freshly opened."""
    return lambda: open_page("pages/scaling.py")


def charts(at) -> dict:
    """Plotly specs by title (the fit figure, which has none, under 'fit')."""
    out = {}
    for el in at.get("plotly_chart"):
        spec = json.loads(el.proto.spec)
        title = spec["layout"].get("title", {}).get("text", "fit")
        out[title.split(",")[0]] = spec
    return out


def text_of(at) -> str:
    parts = []
    for kind in ("markdown", "latex", "caption", "error", "warning", "info"):
        parts += [str(el.value) for el in at.get(kind)]
    return "\n".join(parts)


def trace(spec, name):
    return next(t for t in spec["data"] if t.get("name") == name)


def test_page_renders_the_lecture_plots_with_the_chinchilla_preset(scaling):
    at = scaling()
    assert at.title[0].value == "Scaling laws"
    assert at.selectbox(key="scal_preset").value.startswith("Chinchilla")
    assert at.slider(key="scal_alpha").value == 0.34 and at.slider(key="scal_E").value == 1.69
    text = text_of(at)
    assert r"\frac{406.4}{N^{0.34}}" in text and r"\frac{410.7}{D^{0.28}}" in text
    assert "92.8 tokens per parameter" in text  # D/N at Chinchilla's compute, computed on the page
    c = charts(at)
    assert {"Loss against N at fixed D", "Loss against D at fixed N", "Loss over model size and data",
            "Iso-FLOP curves: each budget spent on every split of N and D"} <= set(c)
    plateau = trace(c["Loss against N at fixed D"], "plateau, D = 1B")
    assert plateau["line"]["dash"] == "dash"
    assert plateau["y"][0] == pytest.approx(CHINCHILLA.plateau_in_N(1e9))
    models = trace(c["Loss over model size and data"], "famous models")
    assert len(models["text"]) == 9 and "Llama 3 8B" in models["text"]
    table = at.dataframe[0].value
    assert list(table["model"])[:3] == ["GPT-3", "Gopher", "Chinchilla"]
    assert table["tokens / parameter"].round(1).tolist()[2] == 20.0
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["FLOPs C"] == "7.12e24"  # the lecture's $10M at the stated defaults
    assert metrics["Optimal N"] == "100B"


def test_preset_switch_moves_the_sliders_and_every_chart(scaling):
    at = scaling()
    before = charts(at)
    at.selectbox(key="scal_preset").select("Epoch replication (Besiroglu et al. 2024)").run()
    assert not at.exception
    assert at.slider(key="scal_alpha").value == 0.3478 and at.slider(key="scal_beta").value == 0.3658
    assert at.slider(key="scal_logB").value == pytest.approx(3.319, abs=1e-3)
    assert "18.4 tokens per parameter" in text_of(at)
    after = charts(at)
    p = trace(after["Loss against N at fixed D"], "plateau, D = 1B")["y"][0]
    assert p == pytest.approx(EPOCH_2024.plateau_in_N(1e9))
    assert p != trace(before["Loss against N at fixed D"], "plateau, D = 1B")["y"][0]


def test_slider_moves_make_a_custom_law_and_back(scaling):
    at = scaling()
    at.slider(key="scal_E").set_value(2.0).run()
    assert not at.exception
    assert at.selectbox(key="scal_preset").value.startswith("Custom")
    c = charts(at)
    assert trace(c["Loss against N at fixed D"], "L∞")["y"] == [2.0, 2.0]
    assert {m.label: m.value for m in at.metric}["Floor L∞"] == "2.0000"
    at.slider(key="scal_alpha").set_value(0.5).run()
    assert r"N^{0.5}" in text_of(at)
    at.selectbox(key="scal_preset").select("Chinchilla (Hoffmann et al. 2022)").run()
    assert at.slider(key="scal_E").value == 1.69 and at.slider(key="scal_alpha").value == 0.34


def test_budget_calculator_follows_its_inputs(scaling):
    at = scaling()
    at.number_input(key="scal_dollars").set_value(1e8).run()
    at.slider(key="scal_util").set_value(0.8).run()
    assert not at.exception
    assert {m.label: m.value for m in at.metric}["FLOPs C"] == "1.42e26"  # 10x the dollars, 2x the utilisation


def test_the_page_ends_with_a_link_to_the_fit_page(scaling):
    at = scaling()
    links = [el.proto for el in at.get("page_link")]
    assert links[-1].page == "scaling_fit" and "fits the same law to yours" in links[-1].label
    assert "fit" not in charts(at) and not any(r.key == "scal_fit_source" for r in at.radio)  # the fit is there
