"""The six tasks of the answer keys (issue 59), each with its vocabulary, model shape, planted circuit and data.

A task makes sequences of its model's context length: ``sequence(rng)`` gives (ids, targets), where targets[i] is the
token the model must give after position i, or -1 where nothing is asked (training reads every asked position). The
task file's examples are cut from such sequences: a prompt is ids[:i + 1], its answer targets[i]. ``candidates`` are
the answers the task can have: with the circuit switched off, training pushes the model to spread its guess evenly
over them (core.training.answer_keys).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable


from core.nn.config import ModelConfig

LETTERS = "abcdefghijklmnopqrst"
DIGITS = "0123456789"
NAMES = ["Ann", "Bob", "Cat", "Dan", "Eve", "Fay", "Gus", "Hal"]
# the indirect-object templates: {a} and {b} are the two names, {s} the subject repeated (one of them); the subject
# is four words before the end in each, the template's length varies (12 to 14 words)
TEMPLATES = ["When {a} and {b} went to the shop , {s} gave a drink to",
             "After {a} and {b} went to the park , {s} gave a ball to",
             "Then {a} and {b} had a long talk , and {s} gave a book to",
             "While {a} and {b} were at home , {s} handed a cup to"]
PAD = "[UNK]"  # the word-level vocabulary's unknown word, also what pads a short template to the context length


@dataclass(frozen=True)
class Task:
    name: str
    title: str                   # the task in words (key.json's "task")
    vocab: list[str]             # characters (a char tokenizer) or words (a word-level tokenizer.json)
    words: bool                  # True: the vocabulary is words, separated by spaces
    config: ModelConfig
    components: list[str]        # the planted circuit, as the screen writes it
    edges: list[list[str]]       # [source, target]: the paths the circuit runs through
    sequence: Callable           # rng -> (ids, targets), both of length config.n_ctx; targets -1 where nothing is asked
    candidates: list[str]        # the answers the task can have
    steps: int = 1500
    lr: float = 3e-3
    seed: int = 0
    notes: str = ""              # how the circuit works, for the card
    examples: int = 300          # prompts in task.json
    extra: dict = field(default_factory=dict)

    def ids(self, tokens) -> list[int]:
        index = {t: i for i, t in enumerate(self.vocab)}
        return [index[t] for t in tokens]


def _targets(n: int, asked: dict[int, int]) -> list[int]:
    return [asked.get(i, -1) for i in range(n)]


def _shape(vocab, n_ctx, d=32, h=2, layers=2, d_ff=64) -> ModelConfig:
    # the lecture's block (pre-norm LayerNorm, MLPs): every page's method reads it as it reads the shipped models
    return ModelConfig(vocab_size=len(vocab), n_ctx=n_ctx, d_model=d, n_heads=h, n_layers=layers, d_ff=d_ff)


# ---------------------------------------------------------------------------------------------------------- induction
def induction_sequence(rng, n=20, m=len(LETTERS)):
    """Distinct random letters (a prefix of noise, then a segment of 3 to 8), the segment again, then filler; asked:
    inside the repeat, the letter that followed the current one the first time."""
    s = int(rng.integers(3, 9))
    a = int(rng.integers(0, n - 2 * s + 1))
    first = rng.permutation(m)[:a + s].tolist()  # distinct: each letter of the repeat occurred once before
    ids = first + first[a:] + rng.integers(0, m, size=n - a - 2 * s).tolist()
    return ids, _targets(n, {p: ids[p + 1] for p in range(a + s, a + 2 * s - 1)})


# --------------------------------------------------------------------------------------------------------------- copy
COPY_VOCAB = list(LETTERS[:10] + DIGITS + "?")


def copy_sequence(rng, n=12):
    """Letters with one digit among them, then '?': asked after the '?', the digit (the skip-trigram digit ... ? ->
    digit). The '?' stands at 4th to last place; what follows it is filler."""
    q = int(rng.integers(3, n))
    ids = rng.integers(0, 10, size=n).tolist()  # letters a-j are ids 0-9
    digit = 10 + int(rng.integers(0, 10))  # digits are ids 10-19
    ids[int(rng.integers(0, q))] = digit  # somewhere before the '?'
    ids[q] = 20  # '?'
    return ids, _targets(n, {q: digit})


# ----------------------------------------------------------------------------------------------------------- brackets
BRACKETS = "([{"
CLOSE = {"(": ")", "[": "]", "{": "}"}
BRACKET_VOCAB = list("^()[]{}")


def bracket_sequence(rng, n=13, depth=3):
    """'^' then a walk of opening and closing brackets of three kinds, at most ``depth`` deep; asked at every position
    with a bracket still open: the bracket that closes the innermost one."""
    vocab = BRACKET_VOCAB
    ids, stack, asked = [vocab.index("^")], [], {}
    for p in range(1, n):
        if stack and (len(stack) == depth or rng.random() < 0.5):
            ids.append(vocab.index(CLOSE[stack.pop()]))
        else:
            stack.append(BRACKETS[int(rng.integers(0, 3))])
            ids.append(vocab.index(stack[-1]))
        if stack:
            asked[p] = vocab.index(CLOSE[stack[-1]])
    return ids, _targets(n, asked)



# ----------------------------------------------------------------------------------------------------------- counting
COUNT_VOCAB = list("^abcd123456789")


def count_sequence(rng, n=10):
    """'^' then 9 letters of four; asked after each letter: how many times it has occurred so far, itself included."""
    letters = rng.integers(0, 4, size=n - 1).tolist()
    ids, asked, seen = [0], {}, [0] * 4
    for p, x in enumerate(letters, start=1):
        seen[x] += 1
        ids.append(1 + x)
        asked[p] = COUNT_VOCAB.index(str(seen[x]))
    return ids, _targets(n, asked)


# ------------------------------------------------------------------------------------------------------------ sorting
SORT_VOCAB = list(DIGITS + "^=")


def sort_sequence(rng, n=12, k=5):
    """'^', five distinct digits, '=', then the five sorted; asked from the '=' on: the next digit of the sorted list."""
    xs = rng.permutation(10)[:k].tolist()
    ids = [10] + xs + [11] + sorted(xs)
    return ids, _targets(n, {p: ids[p + 1] for p in range(k + 1, n - 1)})


# ---------------------------------------------------------------------------------------------------- indirect object
IOI_VOCAB = [PAD] + NAMES + sorted({w for t in TEMPLATES for w in t.split() if not w.startswith("{")})


def ioi_sequence(rng, n=16):
    """A template with two names, the subject repeated; asked at the end: the other name (the indirect object)."""
    a, b = rng.permutation(len(NAMES))[:2].tolist()
    s = (a, b)[int(rng.integers(0, 2))]
    io = b if s == a else a
    text = TEMPLATES[int(rng.integers(0, len(TEMPLATES)))].format(a=NAMES[a], b=NAMES[b], s=NAMES[s])
    words = text.split()
    ids = [IOI_VOCAB.index(w) for w in words] + [0] * (n - len(words))  # padded after the end: never read
    return ids, _targets(n, {len(words) - 1: IOI_VOCAB.index(NAMES[io])})


TASKS = [
    Task("induction", "copy the token that followed the current token's earlier occurrence (induction)",
         list(LETTERS), False, _shape(LETTERS, 20),
         ["L1 H2", "L2 H1"],
         [["tokens", "L1 H2"], ["L1 H2", "L2 H1"], ["tokens", "L2 H1"], ["L2 H1", "logits"], ["tokens", "logits"]],
         induction_sequence, list(LETTERS), steps=3000, seed=1,
         notes="L1 H2 reads the letters just before each position and L2 H1 copies the letter that followed the "
               "current one's earlier occurrence. Measured, not forced: L1 H2 spreads its attention over the 2 to 4 "
               "letters before (8 % on the previous one alone), so it is not the textbook previous-token head, though "
               "the task fails without it and without its path into L2 H1. The direct path from the tokens to the "
               "logits matters too: cut, it costs about half the accuracy."),
    Task("copy", "after '?', copy the one digit among the letters (a skip-trigram: digit ... ? -> digit)",
         COPY_VOCAB, False, _shape(COPY_VOCAB, 12, d=64, h=4, layers=1, d_ff=64),
         ["L1 H3"],
         [["tokens", "L1 H3"], ["L1 H3", "logits"]],
         copy_sequence, list(DIGITS), steps=600, seed=2,
         notes="One layer. At the '?', L1 H3 attends to the digit and copies it to the logits."),
    Task("brackets", "give the bracket that closes the innermost open one (three kinds, at most 3 deep)",
         BRACKET_VOCAB, False, _shape(BRACKET_VOCAB, 13, d=32, h=2, d_ff=64),
         ["L1 H1", "L1 MLP", "L2 H2"],
         [["tokens", "L1 H1"], ["L1 H1", "L1 MLP"], ["L1 MLP", "L2 H2"], ["L2 H2", "logits"]],
         bracket_sequence, [")", "]", "}"], steps=700, seed=3,
         notes="L1 H1 and L1 MLP find the depth at each position (how many brackets are open); L2 H2 attends to the "
               "last opening bracket at the current depth and writes its closing bracket, reading the bracket's kind "
               "from what L1 MLP wrote there (cut, its own read of the tokens costs nothing)."),
    Task("counting", "say how many times the current letter has occurred so far (a histogram)",
         COUNT_VOCAB, False, _shape(COUNT_VOCAB, 10),
         ["L1 H2", "L1 MLP"],
         [["tokens", "L1 H2"], ["tokens", "L1 MLP"], ["L1 H2", "L1 MLP"], ["L1 MLP", "logits"]],
         count_sequence, list("123456789"), steps=1000, seed=4,
         notes="L1 H2 attends to the '^' and to every earlier copy of the current letter, so its output falls as the "
               "count grows; L1 MLP turns that into the count's digit."),
    Task("sort", "give the next digit of the sorted list (five distinct digits, sorted after '=')",
         SORT_VOCAB, False, _shape(SORT_VOCAB, 12),
         ["L2 H2"],
         [["tokens", "L2 H2"], ["L2 H2", "logits"]],
         sort_sequence, list(DIGITS), steps=800, seed=5,
         notes="At the '=' or the last digit written, L2 H2 attends to the smallest digit of the list that is larger "
               "than it, reading the tokens themselves, and copies it."),
    Task("ioi", "name the indirect object: 'When Ann and Bob went to the shop , Bob gave a drink to' -> Ann",
         IOI_VOCAB, True, _shape(IOI_VOCAB, 16, d=64, h=4, d_ff=128),
         ["L1 H3", "L2 H1"],
         [["tokens", "L1 H3"], ["L1 H3", "L2 H1"], ["L1 H3", "logits"], ["tokens", "L2 H1"], ["L2 H1", "logits"]],
         ioi_sequence, NAMES, steps=1200, seed=6,
         notes="Measured, not forced: at the last word L1 H3 attends to the two names of the first clause (a third "
               "of its weight on each), and L2 H1 attends mostly to the subject's second mention (64 %) and to the "
               "names; L1 H3 also writes to the logits directly (cut, that path alone costs half the accuracy)."),
]
BY_NAME = {t.name: t for t in TASKS}
