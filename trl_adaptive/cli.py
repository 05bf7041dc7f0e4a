"""``trl-adaptive``: command-line tools. ``trl-adaptive report RUN_DIR [RUN_DIR ...]`` writes a run report.

trl-adaptive report out/knapsack                       # -> out/knapsack/report/{summary.md, *.png}
trl-adaptive report out/knapsack out/uniform -o cmp    # both runs overlaid in cmp/
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .report.run_files import (
    ALLOCATION_LOG_FILE,
    FINAL_STATISTICS_FILE,
    REPORT_DIR,
    REPORT_SUMMARY_FILE,
    TRAINER_STATE_FILE,
)


def _report(args: argparse.Namespace) -> int:
    from .report import load_run, write_report

    labels = args.labels.split(",") if args.labels else [None] * len(args.run_dirs)
    if len(labels) != len(args.run_dirs):
        print(f"error: --labels has {len(labels)} names for {len(args.run_dirs)} runs", file=sys.stderr)
        return 2
    runs = []
    for run_dir, label in zip(args.run_dirs, labels, strict=True):
        try:
            runs.append(load_run(run_dir, label))
        except (FileNotFoundError, ValueError) as err:  # nothing usable: missing, or damaged past reading
            print(f"error: {err}", file=sys.stderr)
            return 1
    names = [r.label for r in runs]
    if len(set(names)) < len(names):  # two runs called "output": use parent/name
        for r in runs:
            r.label = f"{r.path.parent.name}/{r.path.name}"
    if args.output_dir:
        output_dir = Path(args.output_dir)
    elif len(runs) == 1:
        output_dir = runs[0].path / REPORT_DIR
    else:
        output_dir = Path("trl-adaptive-report")
    report = write_report(runs, output_dir, dpi=args.dpi)
    for run in runs:
        for note in run.notes:
            print(f"[{run.label}] {note}", file=sys.stderr)
    figures = report["figures"]
    print(f"wrote {output_dir / REPORT_SUMMARY_FILE} and {len(figures)} figures: {', '.join(figures)}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="trl-adaptive", description=__doc__.split("\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    report = commands.add_parser(
        "report",
        help="figures and a markdown summary from one or more runs' output_dir",
        description=f"Reads {ALLOCATION_LOG_FILE}, {TRAINER_STATE_FILE} (newest checkpoint) and "
        f"{FINAL_STATISTICS_FILE}; "
        "writes the allocation histogram per epoch, effective-gradient ratio with the all-correct / all-wrong split, "
        "prompt-status counts per epoch and the status transition matrix (Knapsack RL figures 5-8). Several runs "
        "are overlaid.",
    )
    report.add_argument("run_dirs", nargs="+", help="output_dir of each run")
    report.add_argument("-o", "--output-dir", help="default: RUN_DIR/report for one run, ./trl-adaptive-report else")
    report.add_argument("--labels", help="comma-separated run names for legends (default: folder names)")
    report.add_argument("--dpi", type=int, default=90, help="PNG resolution (default 90: small files)")
    report.set_defaults(func=_report)
    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
