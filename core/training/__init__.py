"""Training: recipes, data, the trainer, background jobs, scaling studies, corpora."""
