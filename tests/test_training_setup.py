"""What the training page asks of core before a run starts (core.training.training_setup, and the form's rules in
core.training.job_settings, core.data.corpus and core.serve.fmt), checked against values worked out by hand or built to be known."""
import types

import pytest
import torch

from core.training import training_setup as setup
from core.data.corpus import PYDOC_NAME, TRAIN_FRACTION, describe_corpus, split_train_val, train_length
from core.serve.fmt import gflops, millions, seconds_or_minutes, size_kib
from core.training.job_settings import (FORM_FIELDS, FORM_HELP, INDUCTION_PRESET, JobCost, JobSettings, expects_induction,
                               induction_eta_s)
from core.training.recipes import TrainConfig
from core.nn.bpe import BPETokenizer
from core.jobs import JobBusy

# ---------------------------------------------------------------- formats and the split


def test_sizes_times_and_rates_read_as_the_page_writes_them():
    assert size_kib(10 * 1024 - 1) == "10,239 bytes"  # below 10 KiB a rounded KiB would hide most of it
    assert size_kib(10 * 1024) == "10 KiB"
    assert size_kib(1_115_394) == "1,089 KiB"  # 1,115,394 / 1024 = 1,089.25
    assert seconds_or_minutes(95.4) == "95 s"
    assert seconds_or_minutes(119.4) == "119 s"
    assert seconds_or_minutes(120) == "2.0 min"
    assert seconds_or_minutes(444) == "7.4 min"
    assert gflops(31.04e9) == "31.0 GFLOP/s"
    assert millions(1_003_854) == "1.0" and millions(12_345_678) == "12.3"


def test_the_training_part_is_the_first_90_percent_rounded_down():
    assert train_length(10) == 9
    assert train_length(1_115_394) == 1_003_854  # 1,003,854.6
    assert train_length(9) == 8                 # 8.1
    train, val = split_train_val("abcdefghij")
    assert (train, val) == ("abcdefghi", "j")


# ---------------------------------------------------------------- corpus


def test_tiny_shakespeare_is_offered_first_and_only_where_found():
    assert list(setup.corpus_sources(True)) == ["shakespeare", "pydoc", "upload", "paste"]
    assert list(setup.corpus_sources(False)) == ["pydoc", "upload", "paste"]
    assert setup.corpus_sources(True)["shakespeare"] == "Tiny Shakespeare"


def test_a_builtin_corpus_is_read_and_a_rewritten_file_gets_a_new_key(tmp_path, monkeypatch):
    import core.data.corpus
    path = tmp_path / "tinyshakespeare.txt"
    path.write_text("Our own words:\nNothing here is from a play, only for a test.\n", encoding="utf-8")
    monkeypatch.setattr(core.data.corpus, "shakespeare_path", lambda: path)
    text, info = setup.builtin_corpus("shakespeare", setup.builtin_stamp("shakespeare"))
    assert text == path.read_text(encoding="utf-8")
    assert (info.name, info.chars, info.bytes) == ("tinyshakespeare.txt", 61, 61)  # 15 + 46 characters
    before = setup.builtin_stamp("shakespeare")
    path.write_text("A longer text now, so that the size changes too.\n" * 3, encoding="utf-8")
    assert setup.builtin_stamp("shakespeare") not in ("", before)
    assert setup.builtin_stamp("pydoc") == ""  # Python's own documentation never changes under a server
    path.unlink()  # gone meanwhile: an empty stamp and a reason in words, not a traceback
    assert setup.builtin_stamp("shakespeare") == ""
    with pytest.raises(ValueError, match="cannot read"):
        setup.builtin_corpus("shakespeare")
    monkeypatch.setattr(core.data.corpus, "shakespeare_path", lambda: None)
    with pytest.raises(ValueError, match="no longer where it was found"):
        setup.builtin_corpus("shakespeare")


def test_pydoc_is_the_pythons_own_reference():
    from pydoc_data.topics import topics
    text, info = setup.builtin_corpus("pydoc")
    assert info.name == PYDOC_NAME and info.chars == len(text)
    assert topics["if"].strip("\n") in text


def test_uploaded_bytes_are_checked_in_words():
    text, info, problem = setup.checked_corpus("ab\nba é\n".encode("utf-8"), "notes.txt", 100)
    assert problem is None and text == "ab\nba é\n"
    assert (info.name, info.chars, info.bytes) == ("notes.txt", 8, 9)  # é is two bytes in UTF-8
    assert info.vocab == ["\n", " ", "a", "b", "é"]
    for raw, why in ((b"a" * 2**20 + b"a", "limit is 1 MiB"), (b"\x00\x01", "binary"), (b"\xff\xfe", "not UTF-8"),
                     (b"  \n", "empty")):
        assert setup.checked_corpus(raw, "it", 2**20)[:2] == (None, None)
        assert why in setup.checked_corpus(raw, "it", 2**20)[2]


def test_a_saved_models_name_starts_with_its_corpus():
    assert setup.name_stem("pydoc", PYDOC_NAME) == "pydoc"
    assert setup.name_stem("paste", "the pasted text") == "pasted"
    assert setup.name_stem("upload", "my notes.txt") == "my notes.txt"
    assert setup.name_stem("shakespeare", "tinyshakespeare.txt") == "tinyshakespeare.txt"


# ---------------------------------------------------------------- tokens

TEXT = ("the cat sat on the mat and the dog sat on the log; " * 40) + "a last line, held out.\n" * 30


def test_the_bpe_is_learned_from_the_training_part_and_encodes_both_parts():
    n = int(len(TEXT) * 0.9)
    by_hand = BPETokenizer.train(TEXT[:n], 300)  # what a run learns: the first 90% only
    bpe = setup.learn_bpe(TEXT, 300)
    assert bpe.tokenizer.to_str() == by_hand.to_str()
    assert bpe.train_ids.tolist() == by_hand.encode(TEXT[:n]) and bpe.val_ids.tolist() == by_hand.encode(TEXT[n:])
    assert bpe.split_tokens == (len(by_hand.encode(TEXT[:n])), len(by_hand.encode(TEXT[n:])))
    assert bpe.train_chars == n
    assert bpe.chars_per_token == pytest.approx(n / len(by_hand.encode(TEXT[:n])))
    assert bpe.chars_per_token > 1.5  # words of a repeated text merge into long tokens


def test_a_short_text_runs_out_of_pairs_and_says_so():
    bpe = setup.learn_bpe("abababab cdcd\n" * 10, 1000)
    assert bpe.vocab_size < 300
    note = setup.bpe_shortfall(bpe, 1000)
    assert f"after {bpe.vocab_size:,} tokens" in note and "rather than at 1,000" in note
    assert setup.bpe_shortfall(bpe, bpe.vocab_size) is None and setup.bpe_shortfall(None, 1000) is None


def test_the_bpe_size_bounds():
    assert [setup.bpe_size_ok(v) for v in (255, 256, 16_384, 16_385)] == [False, True, True, False]


def test_the_longest_merged_tokens_come_first_and_ties_keep_their_merge_order():
    pieces = [chr(i) for i in range(256)] + ["ab", "abc", "x", "abcd", "zz"]
    tok = types.SimpleNamespace(pieces=pieces, vocab_size=len(pieces))
    assert setup.longest_pieces(tok, 3) == ["abcd", "abc", "ab"]  # "ab" (id 256) before "zz" (260)
    assert setup.longest_pieces(tok) == ["abcd", "abc", "ab", "zz", "x"]  # the bytes themselves are never listed


def test_the_corpus_numbers_for_characters_and_for_a_bpe():
    info = describe_corpus("aab\n", "x")
    assert setup.corpus_metrics(info, "char", None) == [
        ("Characters", "4", None), ("Size", "4 bytes", None),
        ("Vocabulary m", "3", "Distinct characters; each becomes one token."), ("Tokens", "4", "One per character.")]
    assert [m[0] for m in setup.corpus_metrics(info, "bpe", None)] == ["Characters", "Size"]  # not learned yet
    bpe = setup.LearnedBPE(types.SimpleNamespace(vocab_size=300), torch.zeros(10), torch.zeros(2), train_chars=25)
    vocab, tokens = setup.corpus_metrics(info, "bpe", bpe)[2:]
    assert vocab == ("Vocabulary m", "300", "The 256 bytes and the pieces merged from them.")
    assert tokens == ("Tokens", "12", "10 in the training part and 2 held out: 2.50 characters per token on average "
                                      "in the training part.")


def test_the_vocabulary_preview():
    info = describe_corpus("ba \n", "x")
    (c1, chars), (c2, sample) = setup.vocabulary_preview(info, "char", None)
    assert chars == "⏎ ␣ a b" and "code-point order" in c1
    assert sample == info.sample and c2 == "A passage from the middle of the corpus:"
    [(caption, shown)] = setup.vocabulary_preview(info, "bpe", None)
    assert shown is None and "from 256 to 16,384" in caption
    bpe = setup.learn_bpe(TEXT, 300)
    info = describe_corpus(TEXT, "x")
    (_, longest), (caption, cut) = setup.vocabulary_preview(info, "bpe", bpe)
    ids = bpe.tokenizer.encode(info.sample)
    assert cut == "│".join(bpe.tokenizer.visible_tokens(ids))
    assert f"cut into its {len(ids):,} tokens ({len(info.sample):,} characters)" in caption
    assert longest.split("  ")[0] == max(bpe.tokenizer.pieces[256:], key=len).replace(" ", "␣")


# ---------------------------------------------------------------- settings


def test_each_recipe_brings_its_own_rate():
    assert setup.recipe_lr("adamw") == pytest.approx(3e-3) and setup.recipe_lr("muon") == pytest.approx(6e-3)


def test_the_induction_preset_and_the_forms_defaults_are_the_lectures_model():
    assert setup.induction_preset_form() == dict(
        d_model=64, n_heads=4, n_layers=2, n_ctx=128, batch_size=32, seed=1337, dff_auto=True, tokenizer="char",
        recipe="muon", lr=pytest.approx(6e-3), steps=1500, repeat_on=True, repeat=100)
    assert setup.form_defaults() == dict(d_model=64, n_heads=4, n_layers=2, d_ff=256, n_ctx=128, batch_size=32,
                                         lr=pytest.approx(6e-3), steps=2000, seed=1337)


def test_every_box_of_the_form_is_a_setting_and_holds_its_default():
    assert set(FORM_FIELDS) < set(JobSettings.__dataclass_fields__)
    defaults = setup.form_defaults()
    for key, (label, top, step, help) in FORM_FIELDS.items():
        assert 0 < defaults[key] <= top and 0 < step and label and help, key


def test_the_forms_help_states_the_numbers_of_their_homes():
    assert f"it is learned from the training {TRAIN_FRACTION:.0%} only" in FORM_HELP["tokenizer"]
    span = TrainConfig()
    assert FORM_HELP["repeat"].format(units="tokens") == (
        f"Each chosen window gets one span of {span.repeat_min_span} to {span.repeat_max_span} random tokens, written "
        "twice.")
    assert f"{INDUCTION_PRESET['steps']:,} steps" in FORM_HELP["preset"]
    assert FORM_HELP["bpe_vocab"].startswith("256 (the bytes alone) to 16,384.")


def test_the_forms_values_become_settings():
    boxes = dict(d_model=32.0, n_heads=2.0, n_layers=1.0, d_ff=None, n_ctx=16.0, batch_size=4.0, lr=0.01, steps=7.0,
                 seed=3.0)
    s = setup.settings_from_form(boxes, "adamw", 50, "bpe", 320.0)
    assert s == JobSettings(d_model=32, n_heads=2, n_layers=1, d_ff=None, n_ctx=16, batch_size=4, lr=0.01, steps=7,
                            seed=3, recipe="adamw", repeat_fraction=0.5, tokenizer="bpe", bpe_vocab=320)
    assert type(s.d_model) is int and type(s.bpe_vocab) is int
    assert setup.settings_from_form({**boxes, "d_ff": 100.0}, "muon", None, "char", 512).d_ff == 100
    assert setup.settings_from_form(boxes, "muon", None, "char", 512).repeat_fraction == 0.0  # toggle off


def test_the_form_is_checked_against_the_corpus_and_its_tokens():
    s = JobSettings(d_model=16, n_heads=2, n_layers=1, n_ctx=8, batch_size=2, steps=10)  # D = 10 x 2 x 8 = 160
    info = describe_corpus("abcab" * 20, "x")  # 100 characters, 3 distinct, 90 in the training part
    form = setup.check_form(s, info, None)
    assert form.vocab == 3 and form.split_tokens is None and form.errors == {}
    assert form.cost.tokens == 160 and form.cost.epochs == pytest.approx(160 / 90)
    # one embedding row and one output column per token: 3 tokens of width 16, n_ctx 8 positions
    assert form.cost.n_params == setup.check_form(s, None, None).cost.n_params + 2 * 16 * 2
    assert "n_ctx" in setup.check_form(JobSettings(n_ctx=128), info, None).errors  # 100 characters are too few
    assert setup.check_form(s, None, None).errors == {}  # no corpus: nothing to refuse yet, m = 1
    assert setup.check_form(s, None, None).vocab == 1
    bpe_s = JobSettings(**{**s.__dict__, "tokenizer": "bpe", "bpe_vocab": 300})
    assert setup.check_form(bpe_s, info, None).vocab == 300  # not learned yet: the size asked for
    learned = setup.LearnedBPE(types.SimpleNamespace(vocab_size=280), torch.zeros(40), torch.zeros(20), 90)
    form = setup.check_form(bpe_s, info, learned)
    assert (form.vocab, form.split_tokens) == (280, (40, 20)) and form.cost.epochs == pytest.approx(160 / 40)


def _cost(flops: float) -> JobCost:
    return JobCost(config=None, counts={}, n_params=115_456, tokens=8_192_000, flops=flops, epochs=1.0)


def test_the_cost_numbers_and_the_time_at_the_measured_speed():
    cost = _cost(6 * 115_456 * 8_192_000)  # 5.675e12 FLOP
    assert cost.seconds(31e9) == pytest.approx(5.675e12 / 31e9, rel=1e-3)
    rows = setup.cost_metrics(cost, 31e9, "a quick test")
    assert rows[:3] == [("Parameters N", "115,456", None),
                        ("Training tokens D", "8,192,000", "steps × batch size × n_ctx"),
                        ("Compute 6ND (FLOP)", "5.67 × 10¹²", None)]
    label, value, help = rows[3]
    assert (label, value) == ("Estimated time", "3.1 min")  # 183 s
    assert "6ND divided by 31.0 GFLOP/s, measured by a quick test." in help
    assert setup.cost_metrics(cost, None, "no timing ran")[3] == (
        "Estimated time", "–", "No speed measurement is available: no timing ran.")


def test_when_the_induction_head_should_form():
    preset = JobSettings(steps=1500, repeat_fraction=1.0)
    cost = _cost(300e9)  # 300 s at 1 GFLOP/s; step 500 of 1,500 is a third of it
    assert expects_induction(preset) and not expects_induction(JobSettings(repeat_fraction=0.95))
    assert induction_eta_s(preset, cost, 1e9) == pytest.approx(100.0)
    assert induction_eta_s(preset, cost, None) is None
    assert induction_eta_s(JobSettings(steps=499, repeat_fraction=1.0), cost, 1e9) is None  # ends before step 500
    assert "near step 500: expect it after about 1:40 of this run." in setup.induction_note(preset, cost, 1e9)
    assert "near step 500. Fewer repeats" in setup.induction_note(preset, cost, None)
    assert setup.induction_note(JobSettings(repeat_fraction=0.5), cost, 1e9) is None


class _Job:
    """Stands in for core.training.training_job.TrainingJob: records what was asked of it."""
    busy = False

    def __init__(self, text, corpus_name, settings, **kwargs):
        self.args, self.kwargs, self.stops = (text, corpus_name, settings), kwargs, []

    def start(self):
        if _Job.busy:
            raise JobBusy("the server is full")

    def stop(self, wait=True):
        self.stops.append(wait)


def test_a_new_run_replaces_the_last_one_only_once_it_has_started(monkeypatch):
    monkeypatch.setattr(setup, "TrainingJob", _Job)
    old = _Job("old", "x", None)
    new = setup.start_run(old, "text", "corpus", JobSettings(), sample_prompt="The", owner="me")
    assert new.args[:2] == ("text", "corpus") and new.kwargs == {"sample_prompt": "The", "owner": "me"}
    assert old.stops == [None] and new.stops == []  # stopped without waiting for its step to end
    assert setup.start_run(None, "text", "corpus", JobSettings()).stops == []  # a first run replaces nothing
    monkeypatch.setattr(_Job, "busy", True)
    with pytest.raises(JobBusy):
        setup.start_run(new, "text", "corpus", JobSettings())
    assert new.stops == []  # refused: the last run goes on as it was
