"""A Class round on explanations (issue 58): which of three descriptions fits a feature of the model's SAE that fires
on the teacher's prompt, graded by the scores (core.features.describe): each option's rule scored on the feature's
activations over the held-out windows its explanation was scored on."""
from __future__ import annotations

import numpy as np
import streamlit as st
import torch

from core.features.describe import build_question, explained, reveal_words
from core.features.explain import held_windows, unit_activations
from core.serve.fmt import visible
from pages.classroom.parts import preview
from ui.caching import model_cache
from ui.explanations import sae_explanations
from ui.features import training_record
from ui.models import model_key
from ui.prompts import prompt_input
from ui.saes import available_saes

PICKS = 12  # features the teacher may pick from: the strongest on the prompt first


def _question(entry, model, tok, choice, said: dict, unit: int):
    """core.features.describe's question on ``unit``, cached for the server per model, SAE and unit."""
    def work(sae_key: str, u: int):
        # the scoring split core.features.explain scored the explanations on (its odd held-out windows), so the
        # feature's own rule scores here what its explanation says
        windows = held_windows(model, tok, training_record(entry), None, choice.sae.config.d_sae)[1::2]  # (W, T)
        acts = unit_activations(model, windows, choice.site, lambda a: choice.sae.encode(a)[..., u])  # (W, T)
        return build_question(u, said, windows.numpy(), acts, tok)
    return model_cache(work, 32, resource=True, what="scoring the descriptions", spinner="Scoring the descriptions "
                       "on the feature ...")(model_key(entry), choice.key, unit)


def describe_round(entry, model, tok, default_prompt: str) -> tuple | None:
    """The teacher's prompt, SAE and feature, then (question, choices, meta, (right choice, reveal words)) of a round
    on that feature, previewed; None after saying why there is none."""
    made = _round(entry, model, tok, prompt_input("Your prompt (the model runs on it)", default_prompt,
                                                  "class_prompt", tok, model.config.n_ctx, height=70))
    if isinstance(made, str):
        st.info(f"Not as a class question: {made}.")
        return None
    preview(made, expanded=False)
    return made


def _round(entry, model, tok, prompt) -> tuple | str:
    if prompt.empty or len(prompt.ids) < 2:
        return f"type a prompt of at least two {tok.units}"
    saes = [c for c in available_saes(entry, model)[0] if sae_explanations(entry, c)[0]]
    if not saes:
        return "no SAE of this model has explanations (an SAE trained on the Features page gets them)"
    labels = [c.label for c in saes]
    choice = saes[labels.index(st.selectbox("SAE", labels, key="class_desc_sae"))] if len(saes) > 1 else saes[0]
    said = explained(sae_explanations(entry, choice)[0])
    acts = unit_activations(model, torch.tensor([prompt.ids]), choice.site, choice.sae.encode)[0]  # (T, U)
    # position 0 left out: with no context before it, many features fire there alike
    peak = acts[1:].max(0)  # (U,)
    picks = [int(u) for u in np.argsort(-peak, kind="stable") if peak[u] > 0 and int(u) in said][:PICKS]
    if not picks:
        return "no explained feature of the SAE fires on this prompt"
    unit = st.selectbox("Feature (the page proposes the strongest on your prompt)", picks, key="class_desc_unit",
                        format_func=lambda u: f"feature {u}: fires {peak[u]:.2f} · {said[u]['words']}")
    try:
        q = _question(entry, model, tok, choice, said, unit)
    except ValueError as e:
        return str(e)
    at = 1 + int(acts[1:, unit].argmax())
    before, token = "".join(tok.pieces[i] for i in prompt.ids[max(0, at - 12):at]), tok.pieces[prompt.ids[at]]
    question = (f"Feature {unit} of the SAE on {choice.site} fires most on the teacher's prompt at "
                f"“{visible(token)}” after “{''.join(map(visible, before))}”. Which description fits it?")
    meta = {"kind": "describe", "model": entry.name, "model_id": model_key(entry), "prompt": prompt.text,
            "site": choice.site, "unit": unit}
    return question, q.options, meta, (q.options[q.right], reveal_words(q))
