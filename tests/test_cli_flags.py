"""Issue 55, section 2: every flag of every command line (python -m core.train, core.variants, core.study,
core.features, core.bpe_induction, core.forecast_study) either works or is refused in one line on stderr with exit
status 2, before any work. Each case runs the command's ``main(argv)`` in this process (a subprocess would pay
for torch's import each time) with the work itself replaced by a refusal: a case that gets as far as training or
fitting fails here at once instead of running for minutes. Files: a corpus and a tiny model written here."""
import os
import sys

import pytest
import torch

from core.features import __main__ as features_cli
from core.nn.model_store import save_checkpoint
from core.nn.config import ModelConfig
from core.nn.model import Transformer
from core.nn.tokenizer import CharTokenizer
from core.training import bpe_induction as B
from core.training import forecast_study as FS
from core.training import study as S
from core.training import trainer as T
from core.training.train_cli import main as train_main
from core.training import variants as V
from tests.snapshot_models import made_up_text

TINY = ["--d-model", "16", "--n-heads", "2", "--n-layers", "1", "--n-ctx", "16", "--batch-size", "4",
        "--eval-interval", "5", "--eval-batches", "1", "--heads-interval", "0", "--snapshots", "0"]
SITE = "blocks.0.hook_resid_post"
TRAIN = ["--corpus", "{corpus}", "--out", "{out}", "--steps", "3", *TINY]
SAE = ["--model", "{model}", "--site", SITE, "--steps", "1", "--batch", "64", "--out", "{out}"]
TRANSCODER = ["--model", "{model}", "--transcoder", "--steps", "1", "--batch", "64"]
VARIANTS = ["--steps", "2", "--out", "{out}", "--only", "lecture", "--corpus", "{corpus}"]
STUDY = ["--corpus", "{corpus}", "--grid", "tiny", "--out", "{out}"]
BPE = ["--steps", "5", "--only", "base", "--out", "{out}", "--corpus", "{corpus}"]

# (command, argv, words the one line must hold)
CASES = [
    # core.train: a flag its recipe or its other flags leave nothing to do, once silently ignored
    ("train", [*TRAIN, "--optimizer", "adamw", "--muon-lr", "0.01"], "--muon-lr"),
    ("train", [*TRAIN, "--optimizer", "adamw", "--muon-momentum", "0.9"], "--muon-momentum"),
    ("train", [*TRAIN, "--schedule", "cosine", "--cooldown-frac", "0.3"], "--cooldown-frac"),
    ("train", [*TRAIN, "--optimizer", "adamw", "--cooldown-frac", "0.3"], "--cooldown-frac"),
    ("train", [*TRAIN, "--warmup", "2", "--warmup-frac", "0.1"], "--warmup-frac"),
    ("train", [*TRAIN, "--repeat-min-span", "5"], "--repeat-min-span"),
    ("train", [*TRAIN, "--repeat-max-span", "30"], "--repeat-max-span"),
    ("train", [*TRAIN, "--repeat-random-share", "0.5"], "--repeat-random-share"),
    ("train", [*TRAIN, "--repeat-pool", "8"], "--repeat-pool"),
    ("train", [*TRAIN, "--repeat-fraction", "0.2", "--repeat-pool-steps", "100"], "--repeat-pool-steps"),
    ("train", [*TRAIN, "--repeat-fraction", "0.2", "--repeat-pool", "100000"], "--repeat-pool"),
    # core.features: --k clamped to the latents, flags of the other kind or of the SAE ignored by --transcoder
    ("features", [*SAE, "--k", "100000"], "--k"),
    ("features", [*SAE, "--features", "64", "--k", "65"], "--k"),
    ("features", [*SAE, "--kind", "relu", "--k", "4"], "--k"),
    ("features", [*SAE, "--l1", "0.01"], "--l1"),
    ("features", [*SAE, "--kind", "topk", "--l1", "0.01"], "--l1"),
    ("features", [*SAE, "--kind", "relu", "--l1", "-1"], "l1"),
    ("features", [*SAE, "--kind", "relu", "--l1", "nan"], "l1"),
    ("features", [*SAE, "--layer", "0"], "--layer"),
    ("features", [*SAE, "--seed", "-1"], "--seed"),
    ("features", [*SAE, "--seed", str(2**64)], "--seed"),
    # one over the cores, not a huge number: were the check to break, this process would start that many threads
    ("features", [*SAE, "--threads", str((os.cpu_count() or 1) + 1)], "--threads"),
    ("features", [*SAE, "--steps", "1000000"], "--steps"),
    ("features", [*SAE, "--batch", "100000000"], "--batch"),
    ("features", [*SAE, "--features", "131072", "--batch", "512"], "memory"),
    ("features", [*TRANSCODER, "--kind", "relu"], "--kind"),
    ("features", [*TRANSCODER, "--l1", "0.1"], "--l1"),
    ("features", [*TRANSCODER, "--out", "{out}"], "--out"),
    ("features", [*TRANSCODER, "--site", SITE], "--site"),
    ("features", [*TRANSCODER, "--threads", "0"], "--threads"),
    ("features", [*TRANSCODER, "--features", "0"], "d_sae"),
    ("features", [*TRANSCODER, "--k", "100000"], "--k"),
    ("features", [*TRANSCODER, "--steps", "1000000"], "--steps"),
    ("features", [*TRANSCODER, "--batch", "100000000"], "--batch"),
    # core.variants and core.bpe_induction: --workers 0 became every core and -3 one, silently
    ("variants", [*VARIANTS, "--workers", "0"], "--workers"),
    ("variants", [*VARIANTS, "--workers", "-3"], "--workers"),
    ("variants", [*VARIANTS, "--workers", "1000000"], "--workers"),
    ("variants", [*VARIANTS, "--only", ","], "--only"),
    ("study", [*STUDY, "--note", "two\nlines"], "--note"),
    ("study", [*STUDY, "--note", "x" * 1000], "--note"),
    ("study", [*STUDY, "--workers", "0"], "--workers"),
    ("study", [*STUDY, "--bootstrap", "5000"], "--bootstrap"),
    ("study", [*STUDY, "--nice", "20"], "--nice"),
    ("study", [*STUDY, "--engine", "spark"], "invalid choice"),
    ("study", [*STUDY, "--grid", "huge"], "unknown grid"),
    ("variants", [*VARIANTS, "--steps", "0"], "--steps"),
    ("variants", [*VARIANTS, "--only", "lecture,h3"], "h3"),
    ("bpe", [*BPE, "--steps", "0"], "--steps"),
    ("bpe", [*BPE, "--only", "h3"], "h3"),
    ("features", [*SAE, "--kind", "jump"], "invalid choice"),
    ("features", [*SAE, "--lr", "5"], "lr"),
    ("bpe", [*BPE, "--workers", "0"], "--workers"),
    ("bpe", [*BPE, "--workers", "-1"], "--workers"),
    ("bpe", [*BPE, "--only", ","], "--only"),
    ("bpe", [*BPE, "--engine", "spark"], "invalid choice"),
    ("bpe", ["--only", "base", "--steps", "5", "--corpus", "{corpus}"], "--out"),  # its default was a shipped result
    ("bpe", ["--out", "{out}", "--table", "--steps", "5"], "--table"),
    ("bpe", ["--out", "{out}", "--table", "--only", "base"], "--table"),
    ("bpe", ["--out", "{out}", "--table", "--overwrite"], "--table"),
    # core.forecast_study: --resamples 0 ended in a traceback
    ("forecast", ["--resamples", "0"], "--resamples"),
    ("forecast", ["--resamples", "-5"], "--resamples"),
    ("forecast", ["--resamples", "100000"], "--resamples"),
    ("forecast", ["--check", "--out", "{out}"], "--check"),
    ("forecast", ["--overwrite"], "--overwrite"),
    ("forecast", ["--out", "/dev/null/forecast"], "--out"),
    # python -m core.study <study> ...: each study's own command line, refused by that study's checks
    ("study", ["variants", *VARIANTS, "--steps", "0"], "core.variants: error: --steps"),
    ("study", ["bpe-induction", *BPE, "--only", "h3"], "core.bpe_induction: error: unknown run h3"),
    ("study", ["forecast", "--resamples", "0"], "core.forecast_study: error: --resamples"),
    ("study", ["scaling", *STUDY, "--nice", "20"], "core.study: error: --nice"),
]
MAINS = {"train": train_main, "features": features_cli.main, "variants": V.main, "study": S.main, "bpe": B.main,
         "forecast": FS.main}


def _refuse(*args, **kwargs):
    raise AssertionError("the work started for an argument that must be refused")


@pytest.fixture
def no_work(monkeypatch):
    """Every command's work replaced by a refusal: training, the engines, the SAE and transcoder loops, the fit."""
    from core.features import train as sae_train
    from core.features import transcoder
    from core.training import study_engines

    monkeypatch.setattr(T, "Trainer", _refuse)
    monkeypatch.setattr(study_engines, "make_engine", _refuse)
    monkeypatch.setattr(S, "make_engine", _refuse)
    monkeypatch.setattr(S, "run_study", _refuse)
    monkeypatch.setattr(sae_train, "train_sae", _refuse)
    monkeypatch.setattr(transcoder, "train_transcoder", _refuse)
    monkeypatch.setattr(FS, "analyse", _refuse)


@pytest.fixture(scope="module")
def places(tmp_path_factory):
    """A corpus and a tiny model with an MLP (a transcoder case that got through would write beside it, not beside
    a shipped one)."""
    base = tmp_path_factory.mktemp("flags")
    corpus = base / "text.txt"
    corpus.write_text(made_up_text(6000))
    tok = CharTokenizer.from_text(made_up_text(6000))
    torch.manual_seed(0)
    model = Transformer(ModelConfig(vocab_size=tok.vocab_size, n_ctx=16, d_model=16, n_heads=2, n_layers=2))
    return {"corpus": str(corpus), "model": str(save_checkpoint(base / "tiny", model, tok, {"steps": 1}))}


def one_line_status_2(main, argv, capsys) -> str:
    """Run ``main(argv)``; its one line on stderr, after checking status 2 and that no traceback came with it."""
    try:
        code = main(argv)
    except SystemExit as e:  # argparse's own refusals (and parser.error) leave this way
        code = e.code
    err = capsys.readouterr().err
    assert code == 2, (code, err[-1500:])
    assert "Traceback" not in err and len(err.splitlines()) == 1 and err.endswith("\n"), err[-1500:]
    return err


@pytest.mark.parametrize("command, argv, words", CASES,
                         ids=[f"{c} {' '.join(a[-4:]).replace(chr(10), ' ')[:60]}" for c, a, _ in CASES])
def test_a_bad_flag_is_one_line_and_status_2_before_any_work(command, argv, words, places, tmp_path, capsys, no_work):
    out = tmp_path / "out"
    argv = [a.format(out=out, **places) for a in argv]
    line = one_line_status_2(MAINS[command], argv, capsys)
    assert words in line, line
    assert not out.exists()  # nothing made for a refused command


def test_warmup_frac_now_works_with_the_adamw_recipe():
    """--warmup-frac under --optimizer adamw was dropped for the recipe's 400 steps: now it sets the warmup."""
    from core.training.train_cli import parser, train_config

    args = parser().parse_args(["--out", "x", "--optimizer", "adamw", "--steps", "1000", "--warmup-frac", "0.1"])
    assert train_config(args).warmup == 100


def test_the_features_command_keeps_its_flags_for_a_good_run(places, tmp_path, capsys, monkeypatch):
    """A ReLU SAE with --l1 and a TopK one with --k at most --features get as far as the training, with those
    settings (the flags above are refused; these must not be)."""
    seen = []

    def record(model, tok, site, training, settings, **kw):
        seen.append(settings)
        raise KeyboardInterrupt  # stop there: the settings are what this test reads

    monkeypatch.setattr(sys.modules["core.features.train"], "train_sae", record)
    base = [a.format(out=tmp_path / "o", **places) for a in SAE]
    for extra in (["--kind", "relu", "--l1", "0.01"], ["--features", "64", "--k", "64"]):
        with pytest.raises(KeyboardInterrupt):
            features_cli.main([*base, *extra])
    assert (seen[0].kind, seen[0].l1) == ("relu", 0.01) and (seen[1].d_sae, seen[1].k) == (64, 64)
