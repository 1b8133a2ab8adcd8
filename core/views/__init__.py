"""View-models that two or more pages share, in pure Python; a view-model of one page lives in that page's folder
(pages/attribution/view.py, pages/inside/view.py, pages/over_training/view.py). Here: scaling_view (Scaling laws,
Your scaling law), scaling_study and scaling_forecast (Your scaling law and the Class page's forecast round),
scaling_use (Scaling laws, through ui.cached), variants_view (Why each piece, Lesson, Class), training_view (Home,
Training, Why each piece), features_view (Features, Generation, Attribution graph) and snippets (Copy as code on
Attention, Cause and effect, Features, Attribution graph). They read core.analysis,
core.training and core.figures; nothing in core below them imports them (tests/test_layers.py)."""
