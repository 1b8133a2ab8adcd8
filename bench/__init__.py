"""Benchmarks (see the README); shared helpers."""
import csv


def write_csv(rows: list[dict], path) -> None:
    """Benchmark rows as a CSV file, columns in the first row's order."""
    with open(path, "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
