"""Benchmarks (see the README); shared helpers."""
import csv


def write_csv(rows: list[dict], path) -> None:
    """Benchmark rows as a CSV file, columns in the first row's order."""
    with open(path, "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)


def parse_or_run_one(parser, argv, one) -> "object | None":
    """Parse a benchmark's arguments; when it was started as its own child (``--one JSON``, so that each
    measurement gets a fresh process and its own peak memory), run ``one(**spec)``, print its JSON result and
    return None instead."""
    import argparse
    import json

    parser.add_argument("--one", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.one:
        print(json.dumps(one(**json.loads(args.one))))
        return None
    return args
