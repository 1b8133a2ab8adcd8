"""What a model represents: sparse autoencoders trained on one site of its forward pass, and its MLP's neurons.

    sites        the hook points an SAE reads (TransformerLens's names) and their widths
    activations  a site's vectors over the held-out text, streamed and capped
    sae          the SAE (W_enc, b_enc, W_dec, b_dec; TopK or ReLU), saved and loaded as safetensors, checked
    train        train_sae and evaluate, with SAELens's health numbers
    job          SAE work in a background thread of the server: slots, the memory budget, progress, stop
    forming      features forming: small SAEs at training snapshots matched to the final one by decoder cosine

``python -m core.features --model FOLDER --site NAME`` trains one from the command line."""
from core.features.sae import SAE, SAEConfig, SAEFileError, load_sae, sae_folder, save_sae, saved_sites
from core.features.sites import check_site, site_width, sites
from core.features.train import SAESettings, TrainedSAE, evaluate, train_sae

__all__ = ["SAE", "SAEConfig", "SAEFileError", "SAESettings", "TrainedSAE", "check_site", "evaluate", "load_sae",
           "sae_folder", "save_sae", "saved_sites", "site_width", "sites", "train_sae"]
