"""AppTest of the Training page: settings, refusals, a short run started, stopped, saved and picked."""
import json
import re

import pytest

from tests.polling import wait_until
from core.data.corpus import pydoc_text
from core.nn.params import count_parameters
from core.training.job_settings import JobSettings
from attention_hooks import attention

@pytest.fixture
def page(tmp_path, open_page):
    at = open_page("pages/training.py", models_dir=tmp_path / "models")
    at.radio(key="train_corpus").set_value("pydoc").run()  # always present, unlike Tiny Shakespeare
    assert not at.exception
    yield at
    job = at.session_state["train_job"] if "train_job" in at.session_state else None
    if job is not None:
        job.stop()


def texts(at, kind):
    return [str(el.value) for el in at.get(kind)]


def small_run(at, steps):
    for key, value in (("d_model", 16), ("n_heads", 2), ("n_layers", 1), ("n_ctx", 32), ("batch_size", 4),
                       ("steps", steps)):
        at.number_input(key=f"train_{key}").set_value(value)
    at.run()
    assert not at.exception and not at.error


def test_default_render_shows_the_lecture_model_and_its_cost(page):
    at = page
    assert at.title[0].value == "Training"
    vocab = len(set(pydoc_text()))
    n = count_parameters(JobSettings().model_config(vocab))["total"]
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["Vocabulary m"] == str(vocab)
    assert metrics["Parameters N"] == f"{n:,}"
    assert metrics["Training tokens D"] == f"{2000 * 32 * 128:,}"
    assert metrics["Estimated time"].endswith(("s", "min"))
    latex = " ".join(texts(at, "latex"))
    assert "12d^2 + 4d = 12(64)^2 + 4(64) = 49{,}408" in latex
    assert "6\\,N\\,D" in latex
    for key, value in (("d_model", 64), ("n_heads", 4), ("n_layers", 2), ("n_ctx", 128), ("batch_size", 32),
                       ("steps", 2000), ("seed", 1337)):
        assert at.number_input(key=f"train_{key}").value == value
    assert at.number_input(key="train_lr").value == pytest.approx(6e-3)  # the Muon recipe's AdamW rate
    assert at.radio(key="train_recipe").value == "muon"
    assert any("orthogonalised" in c for c in texts(at, "caption"))  # what Muon does, in a sentence
    at.radio(key="train_recipe").set_value("adamw").run()  # the usual recipe brings its own rate
    assert at.number_input(key="train_lr").value == pytest.approx(3e-3)
    assert any("cosine" in c for c in texts(at, "caption")) and not at.exception
    assert not at.button(key="train_start").disabled
    assert "train_job" not in at.session_state  # nothing starts by itself
    # typing a prompt (as the browser test does) starts nothing either
    at.text_input(key="train_prompt").input("To be, or not to be:").run()
    assert not at.exception and "train_job" not in at.session_state


def test_invalid_settings_are_refused_next_to_the_field(page):
    at = page
    at.number_input(key="train_n_heads").set_value(3).run()
    assert any("not divisible by n_heads=3" in e for e in texts(at, "error"))
    assert at.button(key="train_start").disabled
    # the count does not depend on h, so it is still shown
    assert any("49{,}408" in t for t in texts(at, "latex"))
    at.number_input(key="train_n_heads").set_value(4)
    at.number_input(key="train_steps").set_value(0).run()
    assert any("at least 1" in e for e in texts(at, "error"))
    assert at.button(key="train_start").disabled
    at.number_input(key="train_steps").set_value(2000).run()
    assert not at.error and not at.button(key="train_start").disabled


def test_pasted_text_too_short_for_the_context(page):
    at = page
    at.radio(key="train_corpus").set_value("paste").run()
    assert any("Paste some text" in i for i in texts(at, "info"))
    at.text_area(key="train_paste").input("a short text " * 20).run()
    assert not at.exception
    assert any("needs at least 1,291" in e for e in texts(at, "error"))
    assert at.button(key="train_start").disabled
    at.number_input(key="train_n_ctx").set_value(16).run()
    assert not at.error and not at.button(key="train_start").disabled


@pytest.mark.slow  # a training process or a full fit: seconds; the whole suite runs it
def test_short_run_is_saved_and_joins_the_model_picker(page, tmp_path):
    at = page
    small_run(at, steps=5)
    at.button(key="train_start").click().run()
    assert not at.exception
    job = at.session_state["train_job"]
    assert job.join(120)
    at.run()
    assert not at.exception
    s = job.status()
    assert s.state == "finished" and s.step == 5
    chart = json.loads(at.get("plotly_chart")[0].proto.spec)
    names = [t.get("name") for t in chart["data"]]
    assert names == ["batch loss", "training", "validation"]
    assert chart["data"][1]["x"] == [0, 1, 2, 3, 4, 5]  # 5 steps: an evaluation after each
    assert any("Sample at step 5" in m for m in texts(at, "markdown"))
    # save under a name that needs cleaning; the model is selected in the sidebar on the rerun
    at.text_input(key="train_save_name").input("my tiny/model")
    at.button(key="train_save").click().run()
    assert not at.exception, at.exception
    assert any("Saved **my-tiny-model**" in s for s in texts(at, "success"))
    assert (tmp_path / "models" / "my-tiny-model" / "model.safetensors").is_file()
    labels = [b.label for b in at.get("download_button")]
    assert labels == ["Download the checkpoint folder (.zip)", "Download for transformers (.zip)"]
    # each zip is packed when its button is clicked: a save keeps no archive (about twice the weights) in memory
    assert all(b.proto.deferred_file_id for b in at.get("download_button"))
    assert not [k for k, v in at.session_state["train_saved"].items() if isinstance(v, bytes)]
    # the sidebar rescans on the next run of the app: the new model is listed and already selected.
    # (AppTest runs a switched-to page without app.py, because a pages/ folder exists; so switch back.)
    at.switch_page("app.py").run()
    assert not at.exception
    picker = at.selectbox(key="te_model_name")
    assert picker.options == ["shakespeare-bpe", "shakespeare-char", "my-tiny-model (yours)"]
    assert picker.value == "my-tiny-model"
    assert "The selected model: my-tiny-model" in texts(at, "header")
    # a second save under the same name is refused with a reason
    at.switch_page("pages/training.py").run()
    at.button(key="train_save").click().run()
    assert any("already have a model" in e for e in texts(at, "error"))


@pytest.mark.slow  # a training process or a full fit: seconds; the whole suite runs it
def test_a_run_can_be_stopped_and_keeps_its_weights(page):
    at = page
    small_run(at, steps=100_000)
    at.button(key="train_start").click().run()
    job = at.session_state["train_job"]
    assert at.button(key="train_start").disabled  # one run at a time per session
    wait_until(lambda: job.status().step >= 3)
    at.run()
    at.button(key="train_stop").click().run()
    assert not at.exception
    assert job.join(120)  # the page does not wait for the worker; its polling notices the stop
    at.run()
    s = job.status()
    assert s.state == "stopped" and 3 <= s.step < 100_000
    name = at.text_input(key="train_save_name").value
    assert re.fullmatch(r"pydoc-\d{4}-\d{4}-[0-9a-f]{4}", name), name  # the corpus and a time stamp, never a fixed word
    assert not at.button(key="train_resume").disabled
    assert not at.button(key="train_start").disabled


def _train_and_stop(at):
    small_run(at, steps=3)
    at.button(key="train_start").click().run()
    assert at.session_state["train_job"].join(120)
    at.run()
    assert not at.exception


@pytest.mark.slow  # a real training process for several seconds: the fast lane leaves it to CI
def test_two_sessions_saving_the_same_name_never_overwrite_each_other(tmp_path, open_page):
    """Two students, one server: each session has an owner id; the second cannot replace the first's model,
    even with "replace" ticked, and each session's default name is its own."""
    sessions = []
    for _ in range(2):
        at = open_page("pages/training.py", models_dir=tmp_path / "models")
        at.radio(key="train_corpus").set_value("pydoc").run()
        _train_and_stop(at)
        sessions.append(at)
    first, second = sessions
    assert first.session_state["te_owner"] != second.session_state["te_owner"]
    first.text_input(key="train_save_name").input("class-model")
    first.button(key="train_save").click().run()
    assert any("Saved **class-model**" in s for s in texts(first, "success"))
    saved = (tmp_path / "models" / "class-model" / "model.safetensors").read_bytes()
    second.text_input(key="train_save_name").input("class-model")
    second.checkbox(key="train_overwrite").check()
    second.button(key="train_save").click().run()
    assert not second.exception
    assert any("belongs to someone else" in e for e in texts(second, "error"))
    assert (tmp_path / "models" / "class-model" / "model.safetensors").read_bytes() == saved  # untouched
    # both see it in the class gallery: the first as theirs, the second as a classmate's
    for at, mark in ((first, "yours"), (second, "a classmate’s")):
        at.switch_page("app.py").run()
        picker = at.selectbox(key="te_model_name")
        assert f"class-model ({mark})" in picker.options
    # the first may replace their own
    first.switch_page("pages/training.py").run()
    first.text_input(key="train_save_name").input("class-model")
    first.checkbox(key="train_overwrite").check()
    first.button(key="train_save").click().run()
    assert any("Saved **class-model**" in s for s in texts(first, "success"))
    for at in sessions:
        at.session_state["train_job"].stop()


def test_induction_preset_sets_the_run_and_says_when_the_head_should_form(page):
    from core.training.job_settings import INDUCTION_FORMS_NEAR, INDUCTION_PRESET
    at = page
    assert not at.toggle(key="train_repeat_on").value  # plain text unless asked
    at.button(key="train_induction_preset").click().run()
    assert not at.exception
    assert at.number_input(key="train_steps").value == INDUCTION_PRESET["steps"]
    assert at.toggle(key="train_repeat_on").value and at.slider(key="train_repeat").value == 100
    assert any(f"near step {INDUCTION_FORMS_NEAR:,}" in c for c in texts(at, "caption"))


@pytest.mark.slow  # a training process or a full fit: seconds; the whole suite runs it
def test_a_run_with_repeats_shows_every_head_forming_and_saves_heads_csv(page, tmp_path):
    """The live head view plots, for each head, scores that the test recomputes from the saved weights."""
    import numpy as np
    from core.nn.checkpoint import load_checkpoint
    from core.nn.model_card import read_heads
    from core.analysis.induction import repeat_probe
    at = page
    small_run(at, steps=20)
    at.toggle(key="train_repeat_on").set_value(True).run()
    at.slider(key="train_repeat").set_value(50).run()
    at.button(key="train_start").click().run()
    job = at.session_state["train_job"]
    assert job.join(120)
    at.run()
    assert not at.exception
    charts = [json.loads(c.proto.spec) for c in at.get("plotly_chart")]
    heads_chart = next(c for c in charts if "induction" in json.dumps(c["layout"]))
    names = {t["name"] for t in heads_chart["data"]}
    assert names == {"L1 H1", "L1 H2"}  # one layer of two heads, counted from 1 on screen
    assert any("No head has reached" in c or "crossed" in c for c in texts(at, "caption"))
    at.text_input(key="train_save_name").input("with-heads")
    at.button(key="train_save").click().run()
    folder = tmp_path / "models" / "with-heads"
    rows = read_heads(folder)
    assert rows and {r["step"] for r in rows} >= {0, 20}
    # recompute the final induction score of head 1 from the saved model and the probe, by hand
    model, _ = load_checkpoint(folder)
    c = model.config
    period = min(50, c.n_ctx // 2, c.vocab_size)
    probe = repeat_probe(c.vocab_size, period=period)
    pat = attention(model, probe)[0].pattern.detach().numpy()  # (S, h, n, n)
    i = np.arange(period, 2 * period)
    expected = pat[:, 1, i, i - period + 1].mean()
    final = next(r for r in rows if r["step"] == 20 and r["layer"] == 0 and r["head"] == 1)
    assert abs(final["induction"] - expected) < 1e-3
    trace = next(t for t in heads_chart["data"] if t["name"] == "L1 H2" and t.get("yaxis", "y") == "y")
    assert trace["x"][-1] == 20 and abs(trace["y"][-1] - expected) < 1e-3


# ---------------------------------------------------------------- Tiny Shakespeare missing: fetch it in one click

FETCH_BODY = "".join(f"{i:04d} a text built for the fetch test, not the corpus\n" for i in range(3000)).encode()


@pytest.fixture
def no_corpus(tmp_path, monkeypatch):
    """TE_CORPUS names a missing file and the default place is empty too: no Tiny Shakespeare anywhere."""
    import core.data.corpus
    monkeypatch.setenv("TE_CORPUS", str(tmp_path / "missing.txt"))
    monkeypatch.setattr(core.data.corpus, "DEFAULT_CORPUS", tmp_path / "absent.txt")
    for name in ("http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.delenv(name, raising=False)
    return tmp_path


@pytest.fixture
def local_source(monkeypatch):
    """core.training.fetch.SHAKESPEARE pointed at a local server that serves FETCH_BODY (with that body's checksum)."""
    import hashlib
    from core.training import fetch
    from tests.local_http import serve
    with serve(FETCH_BODY) as server:
        source = fetch.Source(name="Tiny Shakespeare", url=server.url("/good.txt"),
                              sha256=hashlib.sha256(FETCH_BODY).hexdigest(), size=len(FETCH_BODY))
        monkeypatch.setattr(fetch, "SHAKESPEARE", source)
        yield server, source


def test_without_the_corpus_the_page_offers_the_fetch_and_downloads_nothing(no_corpus, open_page, monkeypatch):
    import urllib.request

    def no_network(*args, **kwargs):
        raise AssertionError("a download started without a click")

    monkeypatch.setattr(urllib.request, "urlopen", no_network)
    at = open_page("pages/training.py", models_dir=no_corpus / "models")
    assert "Tiny Shakespeare" not in at.radio(key="train_corpus").options  # options are the labels
    assert at.button(key="train_fetch").label == "Fetch Tiny Shakespeare (1.1 MB)"
    caption = next(c for c in texts(at, "caption") if "was not found" in c)
    assert str(no_corpus / "corpora" / "tinyshakespeare.txt") in caption and "TE_CORPUS" in caption
    at.radio(key="train_corpus").set_value("paste").run()  # other reruns fetch nothing either
    assert not at.exception and not (no_corpus / "corpora").exists()


def test_the_fetch_button_saves_the_corpus_and_selects_it(no_corpus, open_page, local_source):
    server, source = local_source
    at = open_page("pages/training.py", models_dir=no_corpus / "models")
    at.button(key="train_fetch").click().run()
    assert not at.exception and not at.error
    saved = no_corpus / "corpora" / "tinyshakespeare.txt"
    assert saved.read_bytes() == FETCH_BODY and server.requests == ["/good.txt"]  # one download, on the click
    assert at.radio(key="train_corpus").value == "shakespeare"
    assert any("fetched, checked and saved" in s and str(saved) in s for s in texts(at, "success"))
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["Characters"] == f"{len(FETCH_BODY.decode()):,}"
    assert "train_fetch" not in [b.key for b in at.button]
    # from then on every session finds it, and no one is offered the download again
    again = open_page("pages/training.py", models_dir=no_corpus / "models")
    assert "Tiny Shakespeare" in again.radio(key="train_corpus").options
    assert "train_fetch" not in [b.key for b in again.button] and server.requests == ["/good.txt"]


def test_a_failed_fetch_says_where_to_put_the_file_and_saves_nothing(no_corpus, open_page, local_source, monkeypatch):
    import dataclasses
    from core.training import fetch
    _, source = local_source
    monkeypatch.setattr(fetch, "SHAKESPEARE", dataclasses.replace(source, sha256="0" * 64))
    at = open_page("pages/training.py", models_dir=no_corpus / "models")
    at.button(key="train_fetch").click().run()
    assert not at.exception
    error = " ".join(texts(at, "error"))
    assert "could not be fetched" in error and "not the expected one" in error
    assert str(no_corpus / "corpora" / "tinyshakespeare.txt") in error and "TE_CORPUS" in error
    assert list((no_corpus / "corpora").iterdir()) == []  # nothing half-written, nothing to be read later
    assert "Tiny Shakespeare" not in at.radio(key="train_corpus").options  # options are the labels


def _bpe_by_hand(text, vocab):
    """The BPE a run learns, built here without the page: from the training 90% only."""
    from core.nn.bpe import BPETokenizer
    n = int(len(text) * 0.9)
    tok = BPETokenizer.train(text[:n], vocab)
    return tok, len(tok.encode(text[:n])), len(tok.encode(text[n:]))


def test_bpe_choice_shows_its_vocabulary_and_tokens(page):
    at = page
    at.radio(key="train_tokenizer").set_value("bpe").run()
    assert not at.exception and not at.error
    tok, n_train, n_val = _bpe_by_hand(pydoc_text(), 512)
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["Vocabulary m"] == f"{tok.vocab_size:,}" == "512"
    assert metrics["Tokens"] == f"{n_train + n_val:,}"
    n = count_parameters(JobSettings(tokenizer="bpe").model_config(512))["total"]
    assert metrics["Parameters N"] == f"{n:,}"  # the embedding and output layer have 512 rows and columns
    from core.data.corpus import describe_corpus
    sample = describe_corpus(pydoc_text(), "x").sample
    assert "│".join(tok.visible_tokens(tok.encode(sample))) in texts(at, "code")  # the passage cut into tokens
    assert any(f"cut into its {len(tok.encode(sample)):,} tokens" in c for c in texts(at, "caption"))
    # the vocabulary size is checked beside its box
    for bad in (100, 100_000):
        at.number_input(key="train_bpe_vocab").set_value(bad).run()
        assert not at.exception
        assert any("256 (the bytes alone) to 16,384" in e for e in texts(at, "error"))
        assert at.button(key="train_start").disabled
        assert any("Choose a vocabulary size from 256" in c for c in texts(at, "caption"))  # no characters shown
        assert "Vocabulary m" not in {m.label for m in at.metric}
    at.number_input(key="train_bpe_vocab").set_value(300).run()
    assert not at.error and not at.button(key="train_start").disabled
    assert {m.label: m.value for m in at.metric}["Vocabulary m"] == "300"


def test_bpe_context_is_checked_in_tokens(page):
    at = page
    at.radio(key="train_corpus").set_value("paste").run()
    text = "A heron waits at the edge of the pond until the water is still again. " * 30
    at.text_area(key="train_paste").input(text).run()
    at.number_input(key="train_n_ctx").set_value(150).run()
    assert not at.error  # 2,130 characters, 213 held out: enough for n_ctx = 150 characters
    at.radio(key="train_tokenizer").set_value("bpe").run()
    _, n_train, n_val = _bpe_by_hand(text, 512)
    assert n_val < 152  # but not for 150 tokens
    assert any(f"{n_train:,} training and {n_val:,} held-out tokens" in e for e in texts(at, "error"))
    assert any("ran out of pairs" in c for c in texts(at, "caption"))  # a short text has few pairs to merge
    assert at.button(key="train_start").disabled


def n_val_by_hand(vocab):
    return _bpe_by_hand(pydoc_text(), vocab)[2]


@pytest.mark.slow  # a real training process for several seconds: the fast lane leaves it to CI
def test_a_bpe_run_is_trained_saved_with_its_tokenizer_and_scored_in_bits_per_character(page, tmp_path):
    import math
    from core.nn.checkpoint import load_checkpoint, read_config
    from core.nn.model_card import read_card
    at = page
    at.radio(key="train_tokenizer").set_value("bpe").run()
    at.number_input(key="train_bpe_vocab").set_value(320)
    small_run(at, steps=4)
    at.button(key="train_start").click().run()
    job = at.session_state["train_job"]
    assert job.join(120)
    at.run()
    s = job.status()
    assert not at.exception and s.state == "finished", s.message
    assert s.vocab_size == 320 and s.units == "tokens"
    chart = json.loads(at.get("plotly_chart")[0].proto.spec)
    assert chart["layout"]["yaxis"]["title"]["text"] == "cross-entropy (nats per token)"
    assert chart["layout"]["shapes"][0]["y0"] == pytest.approx(math.log(320))  # the uniform guess over 320 tokens
    assert any("Sample at step 4**: the prompt, then 200 tokens" in m for m in texts(at, "markdown"))
    assert any("byte-level BPE of 320 tokens" in c for c in texts(at, "caption"))
    last = s.evals[-1]
    assert any(f"about {last['val_loss'] / math.log(2) / s.val_chars_per_token:.3f} bits per character" in c
               for c in texts(at, "caption"))
    n = int(len(pydoc_text()) * 0.9)
    assert s.val_chars_per_token == pytest.approx((len(pydoc_text()) - n) / n_val_by_hand(320))
    at.text_input(key="train_save_name").input("tiny-bpe")
    at.button(key="train_save").click().run()
    assert not at.exception
    folder = tmp_path / "models" / "tiny-bpe"
    model, tok = load_checkpoint(folder)
    by_hand, _, n_val = _bpe_by_hand(pydoc_text(), 320)
    assert (folder / "tokenizer.json").read_text() == by_hand.to_str()
    assert model.config.vocab_size == 320
    _, _, training = read_config(folder)
    assert training["tokenizer"] == "bpe" and training["val_tokens"] == n_val
    card = read_card(folder)
    assert f"| validation bits per character | {training['val_bits_per_char']:.4f}" in card
    assert "nats/token" in card
