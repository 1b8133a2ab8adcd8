"""The rules that explain a unit (issue 58): a small grammar over the context of a token, as JSON, applied to any
text by ``matches(rule, ids, tokenizer)`` (one bool per position) and said in words a learner reads by ``words``.

Rules are JSON, and ``matches(rule, ids, tokenizer)`` applies one to any text (one bool per position):

    {"kind": "token_in", "tokens": ["a", "e"]}           the current token is one of these (its decoded text)
    {"kind": "prev", "offset": 1, "tokens": ["o"]}        the token ``offset`` places back is one of these
    {"kind": "class", "class": "capital", "offset": 0}    the token (``offset`` back) is of a class, read from its
                                                          decoded text's first non-space character: capital, vowel,
                                                          digit, punctuation; space: its text starts with a space or
                                                          tab; newline: its text holds a line break
    {"kind": "line_start"}                                the text before it ends in a line break
    {"kind": "word_start"}                                it starts a word: its text is a letter after optional
                                                          spaces, and it has a leading space or follows a non-letter
    {"kind": "after", "ngram": "th"}                      the text before it ends with these characters
    {"kind": "inside", "pair": "quotes"}                  an opened double quote (or bracket: "brackets") before it
                                                          is not yet closed
    {"kind": "position", "lo": 0, "hi": 4}                its position in the context is lo <= p < hi
    {"kind": "and", "rules": [a, b]}                      both

Only the ids given are read: position 0 has no text before it (no line start, no "after"; a word start when it
begins with a letter). Classes come from each token's decoded text, so the same rules read a BPE model.
"""
from __future__ import annotations

import json

import numpy as np

from core.serve.fmt import visible

UNEXPLAINED = "unexplained"
CLASSES = ("capital", "vowel", "digit", "space", "punctuation", "newline")
PAIRS = {"quotes": ('"“', '"”'), "brackets": ("([{", ")]}")}
POSITIONS = ((0, 1), (1, 4), (4, 16), (16, 32), (32, 64), (64, 1 << 30))
CLASS_WORDS = {"capital": "a capital letter", "vowel": "a vowel", "digit": "a digit", "space": "a space",
               "punctuation": "punctuation", "newline": "a line break"}
# a token of several characters is classed by its first one (a space before it aside): said so
TOKEN_CLASS_WORDS = {"capital": "a token starting with a capital letter", "vowel": "a token starting with a vowel",
                     "digit": "a token starting with a digit", "space": "a token starting with a space",
                     "punctuation": "a token starting with punctuation", "newline": "a token holding a line break"}



# ------------------------------------------------------------------ rules: checked, applied, said
def check_rule(rule) -> dict:
    """``rule`` if it is a rule of the grammar above; ValueError saying what is wrong otherwise."""
    if not isinstance(rule, dict) or not isinstance(rule.get("kind"), str):
        raise ValueError(f"a rule is a JSON object with a kind, got {str(rule)[:80]!r}")
    kind = rule["kind"]

    def whole(name, lo, hi):
        v = rule.get(name)
        if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
            raise ValueError(f"a {kind} rule's {name} must be a whole number from {lo} to {hi}, got {v!r}")

    def tokens():
        t = rule.get("tokens")
        if not isinstance(t, list) or not t or len(t) > 256 or not all(isinstance(s, str) and s for s in t):
            raise ValueError(f"a {kind} rule's tokens must be a list of 1 to 256 token texts")
    if kind == "token_in":
        tokens()
    elif kind == "prev":
        tokens()
        whole("offset", 1, 64)
    elif kind == "class":
        if rule.get("class") not in CLASSES:
            raise ValueError(f"a class rule's class must be one of {', '.join(CLASSES)}, got {rule.get('class')!r}")
        whole("offset", 0, 64)
    elif kind == "after":
        if not isinstance(rule.get("ngram"), str) or not 1 <= len(rule["ngram"]) <= 16:
            raise ValueError("an after rule's ngram must be text of 1 to 16 characters")
    elif kind == "inside":
        if rule.get("pair") not in PAIRS:
            raise ValueError(f"an inside rule's pair must be one of {', '.join(PAIRS)}, got {rule.get('pair')!r}")
    elif kind == "position":
        whole("lo", 0, 1 << 30)
        whole("hi", 1, 1 << 30)
        if rule["hi"] <= rule["lo"]:
            raise ValueError("a position rule's hi must be above its lo")
    elif kind == "and":
        parts = rule.get("rules")
        if not isinstance(parts, list) or len(parts) != 2 or any(p.get("kind") == "and" for p in parts
                                                                 if isinstance(p, dict)):
            raise ValueError("an and rule joins exactly two rules, neither itself an and")
        for p in parts:
            check_rule(p)
    elif kind not in ("line_start", "word_start"):
        raise ValueError(f"unknown rule kind {kind!r}")
    return rule


def key(rule) -> str:
    return json.dumps(rule, sort_keys=True, ensure_ascii=False)


class Context:
    """What the rules read at every position of token windows ``ids`` (W, T): the tokens a few places back, each
    token's class, and the text before it (its last characters, open quotes and brackets). ``mask(rule)`` is the
    rule's (W, T) bool matches; masks are cached by the rule."""

    def __init__(self, ids, tokenizer):
        self.ids = np.asarray(ids, dtype=np.int64)
        if self.ids.ndim != 2:
            raise ValueError("ids must be (windows, positions)")
        pieces = list(tokenizer.pieces)
        self.by_text: dict[str, list[int]] = {}
        for i, p in enumerate(pieces):
            self.by_text.setdefault(p, []).append(i)
        lead = [p.lstrip(" \t") for p in pieces]
        first = [s[:1] for s in lead]
        self.cls = {  # (V,) bool per class, from each token's decoded text
            "capital": np.array([c.isalpha() and c.isupper() for c in first]),
            "vowel": np.array([bool(c) and c in "aeiouAEIOU" for c in first]),
            "digit": np.array([c.isdigit() for c in first]),
            "space": np.array([p[:1] in (" ", "\t") for p in pieces]),
            "punctuation": np.array([bool(c) and not c.isalnum() and not c.isspace() for c in first]),
            "newline": np.array(["\n" in p for p in pieces]),
        }
        letter = np.array([c.isalpha() for c in first])
        spaced = np.array([len(s) < len(p) for s, p in zip(lead, pieces)])
        W, T = self.ids.shape
        tail = np.empty((W, T), dtype=object)       # the last 3 characters of the text before each position
        quote = np.zeros((W, T), dtype=bool)        # inside double quotes
        bracket = np.zeros((W, T), dtype=bool)      # inside brackets
        prev_letter = np.zeros((W, T), dtype=bool)  # the character just before is a letter
        for w in range(W):
            text, q, depth = "", False, 0
            for t, i in enumerate(self.ids[w].tolist()):
                tail[w, t], quote[w, t], bracket[w, t] = text, q, depth > 0
                prev_letter[w, t] = text[-1:].isalpha()
                p = pieces[i]
                for ch in p:
                    if ch in PAIRS["quotes"][0] and (ch != '"' or not q):
                        q = True
                    elif ch in PAIRS["quotes"][1] and q:
                        q = False
                    elif ch in PAIRS["brackets"][0]:
                        depth += 1
                    elif ch in PAIRS["brackets"][1]:
                        depth = max(0, depth - 1)
                text = (text + p)[-3:]
        # (W, T) the last 1, 2, 3 characters of the text before each position, as fixed-width text arrays: an
        # "after" rule is then one vectorised comparison
        self.ends = {n: np.array([s[-n:] for s in tail.reshape(-1)], dtype=f"<U{n}").reshape(W, T)
                     for n in (1, 2, 3)}
        self.inside = {"quotes": quote, "brackets": bracket}
        self.line_start = self.ends[1] == "\n"
        self.word_start = letter[self.ids] & (spaced[self.ids] | ~prev_letter)
        self.position = np.broadcast_to(np.arange(T), (W, T))
        self.V = len(pieces)
        self._cache: dict[str, np.ndarray] = {}
        self._back: dict[int, np.ndarray] = {}

    def back(self, offset: int) -> np.ndarray:
        """(W, T) the token id ``offset`` places back, -1 where the window has none."""
        if offset not in self._back:
            out = np.full_like(self.ids, -1)
            if offset < self.ids.shape[1]:
                out[:, offset:] = self.ids[:, :self.ids.shape[1] - offset]
            self._back[offset] = out
        return self._back[offset]

    def member(self, texts) -> np.ndarray:
        """(V + 1,) bool: which token ids have one of ``texts``; the last entry (id -1: no token) is False."""
        out = np.zeros(self.V + 1, dtype=bool)
        out[[i for s in texts for i in self.by_text.get(s, [])]] = True
        return out

    def mask(self, rule) -> np.ndarray:
        k = key(rule)
        if k not in self._cache:
            self._cache[k] = self._mask(rule)
        return self._cache[k]

    def _mask(self, rule) -> np.ndarray:
        kind = rule["kind"]
        if kind in ("token_in", "prev"):
            return self.member(rule["tokens"])[self.back(rule.get("offset", 0))]  # id -1 reads the False at the end
        if kind == "class":
            return np.append(self.cls[rule["class"]], False)[self.back(rule["offset"])]
        if kind == "line_start":
            return self.line_start
        if kind == "word_start":
            return self.word_start
        if kind == "after":
            ng = rule["ngram"]
            if len(ng) > 3:  # the ends keep 3 characters: a longer ending is read from the decoded text
                return self._after_long(ng)
            return self.ends[len(ng)] == ng
        if kind == "inside":
            return self.inside[rule["pair"]]
        if kind == "position":
            return (self.position >= rule["lo"]) & (self.position < rule["hi"])
        a, b = rule["rules"]
        return self.mask(a) & self.mask(b)

    def _after_long(self, ng: str) -> np.ndarray:
        pieces = {i: s for s, ids in self.by_text.items() for i in ids}
        out = np.zeros(self.ids.shape, dtype=bool)
        for w in range(len(self.ids)):
            text = ""
            for t, i in enumerate(self.ids[w].tolist()):
                out[w, t] = text.endswith(ng)
                text = (text + pieces[i])[-len(ng):]
        return out


def matches(rule, ids, tokenizer) -> np.ndarray:
    """One bool per position of the token ids ``ids`` (a text of len(ids) tokens, from position 0): where ``rule``
    holds. Anyone can score a rule with it, without this module's scorer."""
    check_rule(rule)
    ids = np.asarray(ids, dtype=np.int64).reshape(1, -1)  # (n,) -> (1, n): one window
    return Context(ids, tokenizer).mask(rule)[0].copy()


def _quoted(texts) -> str:
    def one(t):
        named = {"\n": "a line break", " ": "a space", "'": "an apostrophe", "\n\n": "a blank line"}
        return named.get(t, f"'{visible(t)}'")
    said = [one(t) for t in texts]
    return said[0] if len(said) == 1 else ", ".join(said[:-1]) + " or " + said[-1]


def _class_words(rule, unit: str) -> str:
    return (CLASS_WORDS if unit == "character" else TOKEN_CLASS_WORDS)[rule["class"]]


def _noun(rule, unit: str) -> str | None:
    """The thing a rule names, when it names the current token itself."""
    if rule["kind"] == "token_in":
        return _quoted(rule["tokens"])
    if rule["kind"] == "class" and rule["offset"] == 0:
        return _class_words(rule, unit)
    return None


def _modifier(rule, unit: str) -> str:
    """A phrase placing a token: 'after ...', 'at the start of a line'."""
    kind = rule["kind"]
    if kind in ("prev", "class") and rule["offset"] > 0:
        back = "" if rule["offset"] == 1 else f"{rule['offset']} places "
        what = _quoted(rule["tokens"]) if kind == "prev" else _class_words(rule, unit)
        return f"{back}after {what}"
    if kind == "line_start":
        return "at the start of a line"
    if kind == "word_start":
        return "at the start of a word"
    if kind == "after":
        ng = rule["ngram"]
        return f"after {_quoted([ng])}"
    if kind == "inside":
        return f"inside {rule['pair']}"
    if kind == "position":
        lo, hi = rule["lo"], rule["hi"]
        if (lo, hi) == (0, 1):
            return "at the context's first position"
        return f"at positions {lo} to {hi - 1} of the context" if hi < 1 << 30 else f"from position {lo} on"
    if kind == "token_in":
        return f"that is {_quoted(rule['tokens'])}"
    return f"that is {_class_words(rule, unit)}"


def words(rule, unit: str = "token") -> str:
    """What ``rule`` says, in words a learner reads: "'u' after 'o'", "a line break after a blank line"."""
    if rule is None:
        return UNEXPLAINED
    if rule["kind"] == "and":
        a, b = rule["rules"]
        if _noun(a, unit) is None and _noun(b, unit) is not None:
            a, b = b, a
        noun = _noun(a, unit)
        if noun is None:
            return f"any {unit} {_modifier(a, unit)} and {_modifier(b, unit)}"
        return f"{noun} {_modifier(b, unit)}"
    noun = _noun(rule, unit)
    return noun if noun is not None else f"any {unit} {_modifier(rule, unit)}"
