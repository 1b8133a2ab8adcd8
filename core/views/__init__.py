"""Page view-models: what a page says and picks, computed without Streamlit (numbers, rows and sentences out), so
that the page keeps only widgets, prose and figures. One module per page or page section:

    scaling_view        Scaling laws and Your scaling law: the sliders' ranges, the chosen law, the optimal split
    scaling_use         Scaling laws: the unique-data control and inference-aware sizing
    scaling_study       Your scaling law: the study of tiny models trained here
    scaling_forecast    Your scaling law and the Class page: forecast records, their settling, the shipped studies
    variants_view       Why each piece: the shipped variant study's rows and verdicts
    trace_views         Inside the model: what one Trace says at one position
    training_view       Training: the live view of a run
    over_training_view  Over training: which snapshots one view reads
    features_view       Features: contexts as escaped HTML, the health numbers, the prompt view's rows
    attribution_view    Attribution graph: nodes, edges and the plan of one graph

They read core.analysis, core.training, core.serve and core.figures (training_view and scaling_use draw with a figure
module). Below them, three modules import one: variants_figures (variants_view's Study), study_figures
(scaling_study's UNFITTED) and core.features.index (features_view's duration_words, inside a function)."""
