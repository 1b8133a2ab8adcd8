"""The model card and the training record of a checkpoint folder: README.md, log.csv and heads.csv.

``save_checkpoint`` (core.nn.model_store) writes them with ``model_card``, ``format_log`` and core.analysis.induction's
``write_heads_csv``; the pages read them back with ``read_card``, ``read_log``, ``read_heads`` and
``read_training``. A model folder may come from anyone (an upload, a copied folder), so every read is bounded and
goes through core.serve.folder_files, and every field the card shows is escaped.
"""
from __future__ import annotations

import csv
import io
import math
from pathlib import Path

from core.nn.checkpoint import CARD_FILE, LOG_FILE, CheckpointError, _os_problem, _read_config
from core.serve.fmt import head_label, md_escape
from core.serve.folder_files import read_text_inside
from core.nn.heads_csv import HEADS_CSV, parse_heads_csv
from core.nn.config import ModelConfig
from core.nn.tokenizer_base import Tokenizer
from core.nn.params import count_parameters

LOG_FIELDS = ["step", "train_loss", "val_loss", "tokens_per_s"]  # log.csv's columns, in this order
MAX_LOG_BYTES = 32 * 2**20    # log.csv and heads.csv: a long run's are a few MB
MAX_CARD_BYTES = 2**20        # a card is about 2 KB; the bound stops a folder from sending a huge page to everyone


# ------------------------------------------------------------------------ writing: the card and the log
def _fmt(value, spec: str) -> str:
    # the record comes from config.json, which anyone may have edited: a string, NaN or infinity reads "n/a"
    return format(value, spec) if isinstance(value, (int, float)) and math.isfinite(value) else "n/a"


def _recipe(tc) -> str:
    """The optimiser and schedule of a training record's train_config, in words."""
    if not isinstance(tc, dict):
        return "n/a"
    # a name this app does not know (a newer app's, a hand edit) reads "n/a" instead of raising a KeyError
    opt = {"muon": "Muon (block matrices) + AdamW", "adamw": "AdamW"}.get(tc.get("optimizer", "adamw"), "n/a")
    sched = {"wsd": "warmup, constant, linear cooldown", "cosine": "warmup, cosine decay"}.get(
        tc.get("schedule", "cosine"), "n/a")
    # the learning rates are the file's values as they are: escaped like every other field of the card
    return md_escape(f"{opt}; {sched}; peak lr {tc.get('lr')}" + (f", Muon {tc.get('muon_lr')}" if tc.get("optimizer") == "muon" else ""))


def model_card(name: str, config: ModelConfig, training: dict, tokenizer: Tokenizer | None = None) -> str:
    """A short markdown card from the config, the training metadata and (when given) the tokenizer."""
    counts = count_parameters(config)
    t = training

    def text(key, default="n/a"):
        # card fields can come from users (an upload's file name): escape them so the card, rendered as
        # Markdown for every session, cannot carry links, images or a broken table
        return md_escape(str(t.get(key, default))).replace("\n", " ")

    # without the tokenizer (a card made from config.json alone) the training record says which kind it was
    char_model = tokenizer.kind == "char" if tokenizer is not None else t.get("tokenizer", "char") == "char"
    per = "char" if char_model else "token"  # the losses are per token of the model's own tokenizer
    lines = [
        f"# {md_escape(name)}",
        "",
        "A character-level transformer trained with Transformer Explorer's own training loop." if char_model
        else f"A transformer over {md_escape(tokenizer.describe() if tokenizer is not None else 'sub-word tokens')} "
             "trained with Transformer Explorer's own training loop.",
        "",
        "| property | value |",
        "|---|---|",
        f"| architecture | d={config.d_model}, h={config.n_heads}, L={config.n_layers}, d_ff={config.d_ff}, "
        f"n_ctx={config.n_ctx}{'' if char_model else ' tokens'}, vocabulary m={config.vocab_size} |",
        f"| parameters | {counts['per_block']:,} per block, {counts['total']:,} in total |",
    ]
    if not char_model:  # characters per token is what makes a sub-word model's loss comparable with a character model's
        what = md_escape(tokenizer.describe()) if tokenizer is not None else text("tokenizer_description")
        lines.append(f"| tokenizer | {what}, learned from the training part only (saved as tokenizer.json) |")
        lines.append(f"| characters per token | {_fmt(t.get('val_chars_per_token'), '.3f')} on average over the "
                     f"held-out part |")
    lines += [
        f"| data | {text('corpus')} ({_fmt(t.get('corpus_chars'), ',')} characters) |",
        f"| split | {text('split')} |",
        f"| steps | {_fmt(t.get('steps'), ',')} of batch {text('batch_size')} |",
        f"| recipe | {_recipe(t.get('train_config'))} |",
        f"| tokens seen | {_fmt(t.get('tokens_seen'), ',')} |",
        f"| wall time | {_fmt(t.get('wall_time_s'), '.0f')} s |",
        *([f"| precision | {text('precision')} matrix products" + (" (attention fp32), chosen by a measured probe "
           "(core.nn.precision)" if t.get("precision") == "bfloat16" else "") + " |"] if t.get("precision") else []),
        f"| final train loss | {_fmt(t.get('train_loss'), '.4f')} nats/{per} |",
        f"| final validation loss | {_fmt(t.get('val_loss'), '.4f')} nats/{per} |",
    ]
    bits = t.get("val_bits_per_char")
    if bits is None and char_model and isinstance(t.get("val_loss"), (int, float)):
        bits = t["val_loss"] / math.log(2)  # one token per character: nats/char over ln 2
    if bits is not None:
        lines.append(f"| validation bits per character | {_fmt(bits, '.4f')} (comparable across tokenizers) |")
    if t.get("val_loss_method"):
        lines.append(f"| validation loss measured as | {text('val_loss_method')} |")
    tc = t.get("train_config") if isinstance(t.get("train_config"), dict) else {}  # malformed: no optional rows
    if tc.get("repeat_fraction") or tc.get("repeat_first_steps"):
        lines.append(f"| repeat mixture | {_repeats(tc, 'characters' if char_model else 'tokens')} |")
    cmp = t.get("compared_to")  # measured against another model (core.training.trainer's --compare-to)
    if isinstance(cmp, dict) and isinstance(cmp.get("val_loss"), (int, float)):
        lines.append(f"| against plain text | validation loss {_fmt(t.get('val_loss'), '.4f')} vs "
                     f"{_fmt(cmp['val_loss'], '.4f')} for {md_escape(str(cmp.get('model', '?')))} (no repeats), "
                     f"a difference of {_fmt(cmp.get('difference'), '+.4f')} nats/{per} |")
    if isinstance(t.get("induction"), dict):
        lines.append(f"| induction head | {_induction(t['induction'])} |")
    if isinstance(t.get("copy_probe"), dict):
        lines.append(f"| copying | {_copy_probe(t['copy_probe'])} |")
    if isinstance(t.get("snapshots"), list) and _snapshots(t):
        lines.append(f"| snapshots | {_snapshots(t)} |")
    if t.get("source"):
        lines.append(f"| trained with | {text('source')} |")
    if t.get("stopped_early") and t.get("planned_steps"):
        lines.append(f"| stopped early | after {_fmt(t.get('steps'), ',')} of {_fmt(t['planned_steps'], ',')} planned steps |")
    if t.get("note"):
        lines.append(f"| note | {text('note')} |")
    if t.get("command"):  # inside a code fence Markdown is inert; only a fence in the text could end it
        lines += ["", "Reproduce with:", "", "```", str(t["command"]).replace("`", "'"), "```"]
    return "\n".join(lines) + "\n"


def _repeats(tc: dict, units: str = "characters") -> str:
    # core.training.train_data's mixture: every row repeats during the first steps (a curriculum), then a fraction of rows
    parts = []
    if tc.get("repeat_first_steps"):
        parts.append(f"every row for the first {_fmt(tc['repeat_first_steps'], ',')} steps")
    if tc.get("repeat_fraction"):
        parts.append(f"{_fmt(100 * tc['repeat_fraction'], '.0f')}% of rows after that" if parts  # after the curriculum
                     else f"{_fmt(100 * tc['repeat_fraction'], '.0f')}% of rows")
    span = f"{_fmt(tc.get('repeat_min_span'), 'd')}-{_fmt(tc.get('repeat_max_span'), 'd')}"
    share = tc.get("repeat_random_share", 1.0)
    pool, until, note = tc.get("repeat_pool"), tc.get("repeat_pool_steps"), ""
    if isinstance(pool, int) and pool > 0:  # core.training.trainer.repeat_pool: random tokens from a few ids first
        then = f" for the first {_fmt(until, ',')} steps, then from all" if isinstance(until, int) and until > 0 else ""
        note = f"; random {units} drawn from the {_fmt(pool, ',')} most frequent{then}"
    if not isinstance(share, (int, float)) or share >= 1:
        return (", ".join(parts) + f" hold a span of {span} random {units} written again at a random later place"
                f"{note} (see heads.csv)")
    # the natural-text mixture: some spans are random, the rest the row's own text written again
    return (", ".join(parts) + f" hold a span of {span} {units} written again at a random later place: random "
            f"{units} in {_fmt(100 * share, '.0f')}% of them, the row's own text in the rest{note} (see heads.csv)")


def _snapshots(t: dict) -> str | None:
    # core.nn.snapshots: the losses recorded at each kept step; the files themselves are under checkpoints/
    rows = [r for r in t.get("snapshots", []) if isinstance(r, dict) and isinstance(r.get("step"), int)]
    if not rows:
        return None
    return (f"{len(rows)} under checkpoints/ (float16), at steps {rows[0]['step']:,} to {rows[-1]['step']:,}, "
            "log-spaced: the Over training page and the sidebar's step slider use them")


def _copy_probe(c: dict) -> str:
    # bench/induction_text.py's three numbers and the steps at which each crossed its threshold
    def at(key):
        return "never" if c.get(key) is None else f"from step {_fmt(c[key], ',')}"
    try:
        text = (f"natural text written twice: second copy / first copy {float(c['text_ratio']):.2f} "
                f"({float(c['text_second']):.2f} / {float(c['text_first']):.2f} nats; "
                f"{float(c['text_second_off']):.2f} with the best head off), <= 0.5 {at('text_ratio_step')}; "
                f"random probe: best stripe {float(c['stripe']):.2f} (>= 0.30 {at('stripe_step')}), second copy / "
                f"first {float(c['random_ratio']):.2f} (<= 0.5 {at('random_ratio_step')})")
    except (KeyError, TypeError, ValueError):
        return "n/a"
    if c.get("val_step") is not None:  # a character model's validation target, estimated at each snapshot
        text += f"; validation loss <= 1.57 {at('val_step')}"
    return text + f"; measured by {md_escape(str(c.get('measured_by', 'bench/induction_text.py')))}"


def _induction(s: dict) -> str:
    # written by core.analysis.induction's induction_summary; an older or edited record missing a field reads "n/a"
    # rather than breaking the whole card
    try:
        layer, head = (int(v) for v in s["best_head"])
        text = (f"{head_label(layer, head)} (counted from 1): induction score {float(s['best_induction']):.2f} at step "
                f"{int(s['measured_at_step']):,}")
        formed = s.get("formed_at_step")  # None: no head crossed the threshold during the run
        text += (f"; crossed {float(s['threshold']):.2f} at step {int(formed):,}" if formed is not None
                 else f"; never reached {float(s['threshold']):.2f}")
        if s.get("first_copy_loss") is not None:  # None where the recorded rows hold no probe loss
            text += (f"; probe loss {float(s['first_copy_loss']):.2f} nats on a first copy, "
                     f"{float(s['second_copy_loss']):.2f} on the second")
        return text
    except (KeyError, TypeError, ValueError):
        return "n/a"


def format_log(rows: list[dict]) -> str:
    buf = io.StringIO()
    # a training row carries more keys than the log keeps (extrasaction="ignore"); "\n" gives the same bytes on
    # every system (csv's default is "\r\n")
    writer = csv.DictWriter(buf, fieldnames=LOG_FIELDS, extrasaction="ignore", lineterminator="\n")
    writer.writeheader()
    for row in rows:
        # an empty cell for a missing value (a step without validation): read_log reads it back as None
        writer.writerow({k: ("" if row.get(k) is None else row.get(k)) for k in LOG_FIELDS})
    return buf.getvalue()


# ------------------------------------------------------------------------ reading them back
def _read_inside(path, name: str, max_bytes: int, what: str) -> str | None:
    """The text of a model folder's file ``name`` (core.serve.folder_files: never through a link out of the folder);
    None when there is no such file; CheckpointError naming ``what`` when it cannot be read."""
    folder = Path(path)
    try:
        return read_text_inside(folder, name, max_bytes)
    except FileNotFoundError:  # not an error: heads.csv is optional, and a GPT-2 folder has no log or card
        return None
    except UnicodeDecodeError:
        raise CheckpointError(folder / name, f"unreadable {what}: not UTF-8 text") from None
    except OSError as e:  # a link out of the folder, over max_bytes, unreadable: named, never followed
        raise CheckpointError(folder / name, f"unreadable {what}: {_os_problem(e)}") from None


def read_log(path) -> list[dict]:
    """Rows of a checkpoint's log.csv as dicts of floats (None where a value is absent); [] if no log."""
    text = _read_inside(path, LOG_FILE, MAX_LOG_BYTES, "log")
    if text is None:
        return []
    rows = []
    try:
        for raw in csv.DictReader(io.StringIO(text, newline="")):  # newline="": a quoted cell may hold a newline
            row = {}
            for k in LOG_FIELDS:
                value = (raw.get(k) or "").strip()
                try:
                    row[k] = float(value) if value else None
                except ValueError:  # one bad cell costs that value, not the whole log
                    row[k] = None
            if row["step"] is not None:  # a row without a step has no place on the loss curve's x axis
                rows.append(row)
    except csv.Error as e:
        raise CheckpointError(Path(path) / LOG_FILE, f"unreadable log: {e}") from None
    return rows


def read_heads(path) -> list[dict] | None:
    """Rows of a checkpoint's heads.csv (core.nn.heads_csv.parse_heads_csv); None when the model has none."""
    text = _read_inside(path, HEADS_CSV, MAX_LOG_BYTES, "head scores")
    if text is None:
        return None
    try:
        return parse_heads_csv(text)
    except (csv.Error, ValueError) as e:
        raise CheckpointError(Path(path) / HEADS_CSV, f"unreadable head scores: {e}") from None


def read_training(path) -> dict:
    """The training metadata in a checkpoint's config.json ({} when there is none or it cannot be read); no
    tokenizer is built, so a page may call it on every run."""
    try:
        data = _read_config(Path(path))
    except CheckpointError:  # the page still shows the model; the picker reports the folder's error itself
        return {}
    training = data.get("training")
    return training if isinstance(training, dict) else {}


def read_card(path) -> str:
    """The model card's Markdown; "" when the folder has none. CheckpointError when it is there but cannot be read
    (a link out of the folder, not UTF-8, over MAX_CARD_BYTES)."""
    return _read_inside(path, CARD_FILE, MAX_CARD_BYTES, "model card") or ""
