"""Page view-models: what a page says and picks, in pure Python, so that the page keeps only widgets, prose and
figures. One module per page (or pair of pages): scaling_view (Scaling laws, Your scaling law), scaling_study (the
study part of Your scaling law), variants_view (Why each piece), trace_views (Inside the model), training_view
(Training's live view). They read core.analysis, core.training and core.figures; nothing below imports them
(tests/test_layers.py)."""
