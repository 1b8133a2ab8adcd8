"""The class store's rules, shared by both backends (core.serve.classroom names the whole): what a code, a round, a
choice and a vote may be, the limits, the interface every backend implements, and what a round comes to (shares right,
the shift between votes, the CSV)."""
from __future__ import annotations

import csv
import hashlib
import hmac
import io
import ipaddress
import json
import math
import os
import re
import secrets
import time
import unicodedata
from dataclasses import dataclass, replace

STORE_ENV = "TE_CLASS_STORE"
NEW_VOTERS_ENV = "TE_CLASS_NEW_VOTERS_PER_MINUTE"  # new voters a minute from one client address, in one class
CODE_ALPHABET = "23456789ABCDEFGHJKLMNPQRSTUVWXYZ"  # 32 symbols, no 0/O or 1/I: read off a projector
CODE_LEN = 8                                          # 32**8 = 2**40 codes
MIN_CHOICES, MAX_CHOICES = 2, 12  # a Lesson step may name up to 12 (8 heads, say); the page asks 2-6 of its own
MAX_TEXT = 300                                        # a question's characters (the teacher's own words)
MAX_CHOICE = 300                                      # ... and a choice's
MAX_WORDS = 2000                                      # the model's answer in words (the project's own text)
MAX_VOTER = 64


class ClassError(ValueError):
    """A refusal in words (unknown or expired class, a limit, a choice that is not the round's, a closed phase)."""


class StoreUnavailable(ClassError):
    """The store itself cannot be used (a damaged or read-only file, a Redis that is down): said in words, with what
    to do; not the same as a class that ended."""


@dataclass(frozen=True)
class ClassLimits:
    classes: int = 200            # open classes per server (store)
    students: int = 500           # distinct voters per class
    rounds: int = 100             # rounds per class
    votes_per_second: float = 4   # per voter and class: a burst above it is refused
    ttl_s: float = 12 * 3600      # a class expires this long after its last round opened
    idle_s: float = 3600          # ... and a class with no round yet this long after it was started (a tab left open)
    per_client: int = 3           # live classes one client address may run without the teacher key, and starts of
    place_s: float = 600          # ... its in this window; a class with no round holds its address's place this long
    new_per_minute: int = 10      # classes started a minute on the server without the teacher key
    new_voters_per_minute: int = 60  # new voters a minute from one client address in one class (NEW_VOTERS_ENV)


def limits_from_env(environ=None, base: ClassLimits = ClassLimits()) -> ClassLimits:
    """``base`` with the server's settings applied: TE_CLASS_NEW_VOTERS_PER_MINUTE (a whole number >= 1; anything
    else leaves the default, since a class must never lose its way in to a typo)."""
    raw = (os.environ if environ is None else environ).get(NEW_VOTERS_ENV, "").strip()
    try:
        n = int(raw)
    except ValueError:
        return base
    return replace(base, new_voters_per_minute=n) if n >= 1 else base


def client_key(client) -> str | None:
    """What the store keeps of a client address: a short hash (the address itself is not needed, only sameness). An
    IPv6 address counts by its /64, the block one machine is given (it may use any address in it); an IPv4 address
    mapped into IPv6 as itself."""
    if client is None:
        return None
    try:
        ip = ipaddress.ip_address(str(client))
        if ip.version == 6:
            ip = ip.ipv4_mapped or ipaddress.ip_network(f"{ip}/64", strict=False)
    except ValueError:
        ip = client
    return hashlib.sha256(f"te-client:{ip}".encode()).hexdigest()[:20]


def wait_words(seconds: float) -> str:
    """'in 40 seconds', 'in about 7 minutes': when a refused place frees."""
    s = max(1, math.ceil(seconds))
    if s < 90:
        return f"in {s} second{'s' if s != 1 else ''}"
    m = math.ceil(s / 60)
    return f"in about {m} minutes" if m < 90 else f"in about {m / 60:.0f} hours"


def choice_key(choice: str) -> str:
    """How a choice reads once trimmed and normalised: Unicode NFKC, case folded, runs of spaces as one, and a number
    as its value ("1", "01", "1.0", "1e0" all read 1), so that two choices a room cannot tell apart are refused."""
    c = " ".join(unicodedata.normalize("NFKC", str(choice)).casefold().split())
    if not _NUMBER.fullmatch(c):  # a plain decimal only: "1,2" (a decimal comma) and "1_000" stay as written
        return c
    x = float(c)
    return repr(x + 0.0) if math.isfinite(x) else c


_NUMBER = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)(e[+-]?\d+)?")


def hash_secret(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def new_code() -> str:
    return "".join(secrets.choice(CODE_ALPHABET) for _ in range(CODE_LEN))


def normalize_code(code) -> str:
    """What a student typed, as a code: upper case, spaces and dashes dropped; a ClassError if it cannot be one."""
    c = "".join(str(code or "").split()).replace("-", "").upper()
    if len(c) != CODE_LEN or any(ch not in CODE_ALPHABET for ch in c):
        raise ClassError(f"a class code is {CODE_LEN} letters and digits, such as K7M2 QX9P; that is not one")
    return c


def check_round(question, choices) -> tuple[str, tuple[str, ...]]:
    """A round's question and its 2-12 distinct, non-empty choices, or a ClassError that says what is wrong."""
    q = str(question or "").strip()
    if not q:
        raise ClassError("a round needs a question")
    if len(q) > MAX_TEXT:
        raise ClassError(f"the question is {len(q):,} characters; at most {MAX_TEXT:,}")
    cs = tuple(str(c).strip() for c in (choices or ()))
    if not MIN_CHOICES <= len(cs) <= MAX_CHOICES:
        raise ClassError(f"a round has {MIN_CHOICES} to {MAX_CHOICES} choices (got {len(cs)})")
    if any(not c for c in cs):
        raise ClassError("each choice must be written and differ from the others")
    if any(len(c) > MAX_CHOICE for c in cs):
        raise ClassError(f"a choice is at most {MAX_CHOICE} characters")
    seen: dict[str, str] = {}
    for c in cs:
        if choice_key(c) in seen:
            same = f"'{seen[choice_key(c)]}' and '{c}'" if seen[choice_key(c)] != c else f"'{c}' twice"
            raise ClassError(f"each choice must differ from the others: {same} read the same (case, spaces and the "
                             "way a number is written do not count)")
        seen[choice_key(c)] = c
    return q, cs


def check_voter(voter) -> str:
    v = str(voter or "")
    if not v or len(v) > MAX_VOTER:
        raise ClassError(f"a voter is named by 1 to {MAX_VOTER} characters")
    return v


def check_phase(phase) -> int:
    if phase not in (1, 2) or isinstance(phase, bool):
        raise ClassError(f"a vote is in phase 1 or 2 (got {phase!r})")
    return int(phase)


class ClassStore:
    """The interface (names are contracts: issue 44). Backends implement the underscored primitives' semantics."""

    limits: ClassLimits

    def create_class(self, client=None) -> tuple[str, str]:
        """A new class: (code, secret). ``client``: the address of whoever starts it when the server has no teacher
        key (at most ``per_client`` live classes per address, ``new_per_minute`` new ones a minute on the server);
        None for a teacher who gave the key (only the server's ``classes`` cap)."""
        raise NotImplementedError

    def is_teacher(self, code, secret) -> bool:
        """Whether ``secret`` runs the running class ``code`` (a teacher taking control back after a reload)."""
        raise NotImplementedError

    def lock_joining(self, code, secret, locked: bool = True) -> None:
        """No new voters while locked; those who joined keep voting."""
        raise NotImplementedError

    def durability(self) -> str | None:
        """A sentence for the teacher when the store's own restart would lose recorded votes; None when it keeps
        them (or cannot tell)."""
        return None

    def open_round(self, code, secret, question, choices, meta=None) -> int:
        """A new round in phase 1 (its id: 1, 2, ...). ``meta``: a small JSON-able dict every participant reads with
        the round (what the Class page needs to draw the question: a Lesson step's text, model and prompt)."""
        raise NotImplementedError

    def show_votes(self, code, secret, round_id) -> None:
        """Let every participant (the projector) see the round's counts per choice, not only how many voted."""
        raise NotImplementedError

    def set_phase(self, code, secret, round_id, phase) -> None:
        """Open vote 2 ("discuss and vote again"): vote 1 is closed from then on."""
        raise NotImplementedError

    def vote(self, code, round_id, voter, choice, phase, client=None) -> None:
        """``voter``: one per browser (the page's choice); a voter new to the class is refused while joining is locked,
        and when ``client`` (its address) already brought ``new_voters_per_minute`` new voters in the last minute."""
        raise NotImplementedError

    def tally(self, code, secret, round_id, phase) -> dict[str, int]:
        raise NotImplementedError

    def reveal(self, code, secret, round_id, answer, words: str = "") -> None:
        """The model's answer (one of the choices, or None when it gives no single one) and its numbers in words;
        voting ends and every participant sees the counts. Once only: a revealed round is never revealed again."""
        raise NotImplementedError

    def close(self, code, secret) -> None:
        raise NotImplementedError

    def round_info(self, code, round_id=None) -> dict:
        """What any participant may see of a round (the latest when ``round_id`` is None): question, choices, meta,
        phase, how many voted in each phase, ``revealed`` with the answer and its words, and ``counts`` per choice in
        each phase once the teacher showed the votes or revealed the answer (None before); ``joined`` (voters in the
        class) and ``locked`` (joining closed), also when the class has no round yet."""
        raise NotImplementedError

    def shift(self, code, secret, round_id) -> dict[tuple[str, str], int]:
        """Voters who voted in both phases: {(vote 1, vote 2): count}."""
        raise NotImplementedError

    def rounds(self, code, secret) -> list[dict]:
        """Every round of the class, for the teacher's CSV: question, choices, counts per choice in each vote, answer."""
        raise NotImplementedError


MAX_META = 16_384  # characters of a round's meta, as JSON


def check_meta(meta) -> str:
    try:
        text = json.dumps(meta or {})
    except (TypeError, ValueError) as e:
        raise ClassError(f"a round's details must be plain data: {e}") from None
    if len(text) > MAX_META:
        raise ClassError(f"a round's details are {len(text):,} characters as JSON; at most {MAX_META:,}")
    return text


PUBLIC = object()  # the secret argument of a participant's call: no teacher check (None or "" is a wrong secret)


def check_secret(stored_hash, secret) -> None:
    """A PermissionError unless ``secret`` is the class's: None, "" or anything not a string never is."""
    if not isinstance(secret, str) or not secret or not hmac.compare_digest(str(stored_hash), hash_secret(secret)):
        raise PermissionError("only the teacher who started this class can do that")


def round_view(code, rid, rd, n1, n2, counts, joined=0, locked=False) -> dict:
    """round_info's answer from a round's fields (rd: question, choices, meta, phase, shown, revealed, answer, words)."""
    return {"code": code, "round": int(rid), "joined": int(joined), "locked": bool(locked), "question": rd["question"], "choices": rd["choices"], "meta": rd["meta"],
            "phase": rd["phase"], "votes": {1: n1, 2: n2}, "shown": rd["shown"] or rd["revealed"],
            "revealed": rd["revealed"], "answer": rd["answer"], "words": rd["words"],
            "counts": counts() if rd["shown"] or rd["revealed"] else None}


def counts_of(choices, votes) -> dict[str, int]:
    out = {c: 0 for c in choices}
    for c in votes:
        if c in out:
            out[c] += 1
    return out



# ----------------------------------------------------------------------------- what a round comes to
def round_summary(choices, vote1: dict, vote2: dict, answer) -> dict:
    """How many voted in each phase and, where the model gave one answer, the share right in each: {"n1", "n2",
    "right1", "right2"} (shares None when nobody voted in that phase or there is no single answer)."""
    n1, n2 = sum(vote1.values()), sum(vote2.values())
    share = lambda votes, n: None if answer is None or n == 0 else votes.get(answer, 0) / n  # noqa: E731
    return {"n1": n1, "n2": n2, "right1": share(vote1, n1), "right2": share(vote2, n2)}


SHIFT_ROW = "vote 1 ↓ · vote 2 →"  # the row labels' column: a name no choice of 2 to 200 plain characters is likely to take


def shift_rows(choices, shift: dict) -> list[dict]:
    """The shift between the votes as rows (one per vote-1 choice, a column per vote-2 choice): a 2-D table."""
    return [{SHIFT_ROW: a, **{b: shift.get((a, b), 0) for b in choices}} for a in choices]


CSV_FIELDS = ("round", "question", "kind", "model", "prompt", "choice", "vote 1", "vote 2", "model's answer")


def rounds_csv(rounds: list[dict]) -> str:
    """The teacher's download: one line per round and choice (counts in each vote), the model's answer on each."""
    out = io.StringIO()
    w = csv.writer(out)
    w.writerow(CSV_FIELDS)
    for r in rounds:
        meta = r.get("meta") or {}
        answer = r["answer"] if r.get("revealed") else ""
        for c in r["choices"]:
            w.writerow([_cell(x) for x in (r["round"], r["question"], meta.get("kind", "free"), meta.get("model", ""),
                        meta.get("prompt", ""), c, r["vote1"].get(c, 0), r["vote2"].get(c, 0),
                        "" if answer is None else answer)])
    return out.getvalue()


def _cell(x):
    """A spreadsheet opens a text cell that starts with = + - @ as a formula (=HYPERLINK(...)): such teacher text is
    written with a leading apostrophe, as spreadsheets themselves mark text."""
    return "'" + x if isinstance(x, str) and x[:1] in ("=", "+", "-", "@", "\t", "\r") else x


def peer_advice(share_right: float) -> str:
    """What peer instruction suggests after vote 1 for the share of the room that was right (Crouch and Mazur's
    thresholds, as Learning Catalytics applies them)."""
    if share_right < 0.3:
        return "under 30 % right: explain the idea again before anyone votes a second time"
    if share_right <= 0.7:
        return "between 30 and 70 % right: have them convince a neighbour, in pairs, then open vote 2"
    return "over 70 % right: most have it; reveal the answer and say briefly why"



def gone(code, reset_at=None, why: str = "") -> ClassError:
    """A class that is not running, said as such; where this store saw itself reset (``reset_at``, a time), that
    is named too, since a reset loses every class started before it."""
    if reset_at is None:
        return ClassError(f"no class {code} is running (it may have ended or expired)")
    at = time.strftime("%H:%M", time.gmtime(reset_at))
    return ClassError(f"no class {code} is running (it may have ended or expired; also, the class store was reset at "
                      f"{at} UTC ({why}), and the classes started before then are gone)")


def freed_in(expiries, now) -> str:
    """When the first of ``expiries`` (times a place frees) comes, in words."""
    return wait_words(min(expiries) - now) if expiries else "soon"
