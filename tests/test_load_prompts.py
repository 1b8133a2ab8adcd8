"""The classroom bench types new prompts: every (student, rerun) pair must send a prompt that no other pair
sends, and the shipped character model must read all of it. Otherwise characters it does not know are dropped,
students end up typing the same prompt, and the server's shared caches answer for work never done (this
happened with digit tags: 90 reruns were 8 prompts)."""
from bench.load import new_prompt
from core.nn.checkpoint import read_config
from ui import DEFAULT_MODEL, SHIPPED_DIR


def test_every_rerun_prompt_is_new_and_known_to_the_shipped_model():
    _, tok, _ = read_config(SHIPPED_DIR / DEFAULT_MODEL)
    seen = {}
    for i in range(40):
        for k in range(5):
            ids = tuple(tok.encode(new_prompt(i, k)))  # strict: raises on a character outside the vocabulary
            assert ids not in seen, f"students {seen.get(ids)} and {(i, k)} type the same prompt"
            seen[ids] = (i, k)
