"""What a model represents: sparse autoencoders trained on one site of its forward pass, and its MLP's neurons.
The SAE itself and the sites it reads are analysis (core.analysis.sae, core.analysis.sites: the attribution graph
reads transcoders too); this package trains, browses and steers with them, above training (its jobs and command
line build on training's).

    activations  a site's vectors over the held-out text (core.data.held_out), streamed and capped
    train        train_sae and evaluate, with SAELens's health numbers
    transcoder   an SAE from an MLP's input to its output, trained per layer; the replacement model's losses
    job          SAE work in a background thread of the server: slots, the memory budget, progress, stop
    forming      features forming: small SAEs at training snapshots matched to the final one by decoder cosine
    index, browse, units, steering   the feature browser: top examples, cards, a unit's steering
    upgrade      folders saved before issue 57 brought to SAELens's layout and numbers (README.md: loading
                 ours in SAELens and circuit-tracer)
    rules        the explanations' grammar (issue 58): rules as JSON, ``matches`` (a rule on a text), ``words``
    explain      a unit explained: the rule search on held-out text and its scores (detection, fuzzing, control)
    explanations explanations.json beside an SAE or transcoder: checked, read, written; the search box's ``search``
    describe     the Class's "which description fits this feature?": three descriptions scored on one feature

``python -m core.features --model FOLDER --site NAME`` trains one from the command line."""
from core.features.train import SAESettings, TrainedSAE, evaluate, train_sae

__all__ = ["SAESettings", "TrainedSAE", "evaluate", "train_sae"]
