"""The lesson's questions: each is a prediction the learner makes before the live model answers it.

    grading.py   how a guess is graded, and when the model's answer is too close to call (Grade.correct None)
    measures.py  what a step measures on the model and the prompt (the same core functions the pages use)
    records.py   what a step is (Step), reads (Context), asks (Question) and shows (Reveal); question(), answer()
    steps.py     the 12 steps as records: key, title, page, question, measure, grade, what it needs
    pair_steps.py  steps 11 and 12: patching between two prompts, the induction circuit by path patching

Everything is re-exported here: ``from core import lesson as LS; LS.STEPS, LS.grade_choice, LS.key_weights``."""
from core.lesson.grading import (AMBIGUOUS_SHARE, CLOSE, MASK_CHANGE, MIN_NOISE, NOISE_SE, Grade, close_call,
                                 grade_choice, grade_direction, grade_number, grade_yes_no)
from core.lesson.measures import (CHOICES, DRAWS, block_numbers, copy_loss_change, fitted_prompt, head_patching,
                                  key_choices, key_sources, key_weights, mask_experiment, parameter_count,
                                  source_names, temperature_pair, which_is_cold, which_key)
from core.lesson.records import Context, Question, Reveal, Step, answer, question, unmet
from core.lesson.pair_steps import MIN_GAP
from core.lesson.steps import CHINCHILLA_AT, COST_TOKENS, PIECES, STEP, STEPS

N_STEPS = len(STEPS)

__all__ = ["AMBIGUOUS_SHARE", "CLOSE", "MASK_CHANGE", "MIN_NOISE", "NOISE_SE", "Grade", "close_call", "grade_choice",
           "grade_direction", "grade_number", "grade_yes_no", "CHOICES", "DRAWS", "block_numbers", "copy_loss_change",
           "fitted_prompt", "head_patching", "key_choices", "key_sources", "key_weights", "mask_experiment",
           "parameter_count", "source_names", "temperature_pair", "which_is_cold", "which_key", "Context", "Question",
           "Reveal", "Step", "answer", "question", "unmet", "CHINCHILLA_AT", "COST_TOKENS", "MIN_GAP", "PIECES",
           "STEP", "STEPS", "N_STEPS"]
