"""Write the task suite's shipped splits: ``python -m labkit tasks --out data/tasks``.

The files are rebuilt byte for byte from the seeds (:func:`labkit.tasks.write_splits`).
"""

from __future__ import annotations

import argparse

from labkit.tasks.splits import write_splits


def main(argv: list[str] | None = None) -> None:
    """Command line: write the shipped splits (``python -m labkit tasks --out data/tasks``)."""
    parser = argparse.ArgumentParser(description="Write the task suite's train/eval splits.")
    parser.add_argument("--out", default="data/tasks", help="output folder (default data/tasks)")
    args = parser.parse_args(argv)
    for path in write_splits(args.out):
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
