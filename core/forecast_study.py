"""``python -m core.forecast_study``: the shipped studies' forecast calibration, the two forms on repeated data and
our own R* (core.training.forecast_study), into the shipped study's forecast.json and bench/results."""
if __name__ == "__main__":
    from core.training.forecast_study import main

    raise SystemExit(main())
