"""``ipy-resume``: look at and check a checkpoint store from a terminal.

A thin adapter over :mod:`ipy_resume.store`, :mod:`ipy_resume.engine.reports` and
:mod:`ipy_resume.engine.queries`; the argument types of ``gc`` live beside ``parse_size`` in
:mod:`ipy_resume.store.retention`, where ``%checkpoint gc`` finds them too.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from ..engine import reports
from ..engine.queries import Timeline, stats_text
from ..store import StoreError, location, open_store
from ..store.retention import count_argument, size_argument


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ipy-resume",
        description="Inspect and check an ipy_resume checkpoint store.",
    )
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--store",
        type=str,
        default=None,
        metavar="DIR",
        help="the store, a folder or a URL such as s3://bucket/prefix "
        "(default: $IPY_RESUME_DIR, else ./.ipy_resume)",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    listing = commands.add_parser("list", parents=[common], help="list checkpoints, oldest first")
    listing.add_argument("--json", action="store_true", help="print a JSON array of records")
    show = commands.add_parser("show", parents=[common], help="describe one checkpoint")
    show.add_argument("target", metavar="ID", help="checkpoint id, unique prefix, or CELL_ID")
    show.add_argument("--json", action="store_true", help="print JSON")
    commands.add_parser(
        "verify", parents=[common], help="check every signature and checksum; exit 1 on problems"
    )
    gc = commands.add_parser(
        "gc",
        parents=[common],
        help="remove old checkpoints, unreferenced blobs, temp leftovers and quarantine",
    )
    gc.add_argument(
        "--keep-last",
        type=count_argument,
        default=None,
        metavar="N",
        help="keep the N newest per CELL_ID",
    )
    gc.add_argument(
        "--max-size",
        type=size_argument,
        default=None,
        metavar="SIZE",
        help="then drop the oldest until the store fits, e.g. 500M or 2G",
    )
    gc.add_argument("--json", action="store_true", help="print the report as JSON")
    commands.add_parser(
        "trust",
        parents=[common],
        help="adopt a store signed under another key: re-sign what passes its checksums",
    )
    stats = commands.add_parser(
        "stats", parents=[common], help="checkpoints, bytes, hit rate, latencies, time saved"
    )
    stats.add_argument("--json", action="store_true", help="print JSON")
    run = commands.add_parser(
        "run",
        help="execute a notebook headless, every cell checkpointed; resumes a run that died",
        description=(
            "Execute IN.ipynb through a headless kernel with every code cell checkpointed. "
            "Running the same command after a run died restores the finished cells and "
            "continues from the first unfinished one. Exit 0 only when every cell ran."
        ),
    )
    run.add_argument("notebook", type=Path, metavar="IN.ipynb")
    run.add_argument(
        "-o",
        "--output",
        type=Path,
        default=None,
        metavar="OUT.ipynb",
        help="the executed notebook (default: IN.out.ipynb next to IN)",
    )
    run.add_argument(
        "-p",
        "--parameter",
        nargs=2,
        action="append",
        metavar=("NAME", "VALUE"),
        help="a parameter, injected after the cell tagged 'parameters' (as papermill does)",
    )
    run.add_argument(
        "--store",
        type=str,
        default=None,
        metavar="DIR",
        help="the store, a folder or a URL such as s3://bucket/prefix "
        "(default: $IPY_RESUME_DIR, else .ipy_resume next to the notebook)",
    )
    run.add_argument(
        "--cell-timeout",
        type=_positive_seconds,
        default=None,
        metavar="S",
        help="stop with an error when one cell runs longer than S seconds",
    )
    run.add_argument(
        "--kernel", default=None, metavar="NAME", help="kernel (default: the notebook's)"
    )
    demo = commands.add_parser(
        "demo", help="run the crash-and-resume story headless against a real kernel"
    )
    demo.add_argument("--workdir", type=Path, default=None, help="folder to run in (default: temp)")
    return parser


def _positive_seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected seconds, e.g. 600, not {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive number of seconds, not {text}")
    return value


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``ipy-resume`` command.

    >>> main(["list", "--store", "/nonexistent"])  # doctest: +SKIP
    no checkpoints yet
    0
    """
    args = _parser().parse_args(argv)
    if args.command == "run":
        try:
            from .headless import run_command, validate_parameters
        except ImportError as exc:
            print(
                f"ipy-resume run needs nbclient ({exc}); install it with "
                "pip install 'ipy_resume[headless]'",
                file=sys.stderr,
            )
            return 2

        return run_command(
            args.notebook,
            args.output,
            validate_parameters(args.parameter),
            args.store,
            args.cell_timeout,
            args.kernel,
        )
    if args.command == "demo":
        from .demo import run_demo

        return run_demo(args.workdir)
    try:
        root = location.store_location(args.store)
        store = open_store(root)
        if args.command == "list":
            manifests = store.manifests()
            short = store.short_ids()
            if args.json:
                print(json.dumps([reports.record(m, short.get(m.id)) for m in manifests], indent=2))
            else:
                print(reports.table(manifests, store.journal().events(), short))
            unread = len(store.ids()) - len(manifests)
            if unread > 0:  # (an empty table alone would say the store is empty)
                print(
                    f"ipy-resume: {unread} more checkpoint(s) in {root} are not listed: they do "
                    "not verify under this machine's key (signed under another key, or "
                    "damaged); 'ipy-resume verify' says which, 'ipy-resume trust' adopts the "
                    "ones whose checksums pass",
                    file=sys.stderr,
                )
        elif args.command == "show":
            manifest = reports.resolve(store.manifests(), args.target)
            details = reports.describe(
                manifest, store.short_id(manifest.id), store.restore_paths(manifest)
            )
            if args.json:
                print(json.dumps(details, indent=2, default=str))
            else:
                print(reports.details_text(details))
        elif args.command == "verify":
            found = store.audit()
            for line in found.lines:
                print(line)
            for note in found.notes:
                print(f"note: {note}")
            if found.problems:
                print(f"{len(found.problems)} problem(s) in {root}", file=sys.stderr)
                return 1
            print(f"store {root} is sound ({found.files_checked} files checked)")
        elif args.command == "gc":
            report = store.gc(keep_last=args.keep_last, max_size=args.max_size)
            print(json.dumps(report.to_json(), indent=2) if args.json else report.summary())
        elif args.command == "trust":
            refused: list[str] = []
            count = store.trust(refused)
            for line in refused:
                print(line)
            print(f"re-signed {count} checkpoint(s) of {root} under your key")
            if refused:
                print(f"{len(refused)} checkpoint(s) not adopted", file=sys.stderr)
                return 1
        elif args.command == "stats":
            data = Timeline.of(store).stats()
            print(json.dumps(data, indent=2) if args.json else stats_text(data))
    except reports.TargetError as exc:
        print(f"ipy-resume: {exc}", file=sys.stderr)
        return 2
    except StoreError as exc:
        print(f"ipy-resume: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
