"""The job's options and command-line arguments, without importing Spark.

``leveret analyze`` builds its sub-command from :func:`add_arguments` while ``leveret serve``
must not pay for (or even have) PySpark, so this module imports only the standard library
and :mod:`leveret.pipeline.topology`; :mod:`leveret.pipeline.job` is imported when the job
actually runs.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from leveret.pipeline.topology import Topology, TopologySource, from_dump


@dataclass(frozen=True)
class JobOptions:
    """What to analyse and where to put the results."""

    trace: Sequence[str]
    topology: TopologySource
    out: Path
    proposed: TopologySource | None = None
    master: str | None = None
    conf: Mapping[str, str] = field(default_factory=dict)
    bindings: bool = True  # per-binding attribution
    recorded: bool = True  # compare routes with the queues the broker recorded
    rows: bool = False  # read the segments' rows, not the counts beside them
    report: bool = True  # write report.html
    top: int = 20  # rows per table in the HTML report
    progress_interval: float = 5.0  # seconds between task-progress lines (0: none)
    ui: bool = False  # Spark's web UI (off: a short job does not need it)
    # Route on the driver up to this many distinct keys (more: in Spark, mapPartitions).
    driver_keys: int = 100_000
    # Derive the tables on the driver (Arrow) up to this many key-minute groups (more: in Spark);
    # the driver gets a row per key and per route class and minute of them.
    driver_groups: int = 4_000_000


# -- command line ------------------------------------------------------------------------------


def _conf_pair(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return key, value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The job's options, for its own parser and for ``leveret analyze``."""
    parser.add_argument(
        "--trace",
        action="append",
        required=True,
        metavar="DIR",
        help="trace directory (reads DIR/trace-*.jsonl*) or file/glob; repeatable",
    )
    parser.add_argument(
        "--topology",
        required=True,
        metavar="SOURCE",
        help="current topology: `leveret log dump` output or a RabbitMQ definitions.json "
        "(leveret analyze: also a Leveret data dir)",
    )
    parser.add_argument(
        "--proposed", metavar="SOURCE", help="proposed topology for the what-if report"
    )
    parser.add_argument("--out", type=Path, required=True, metavar="DIR", help="output directory")
    parser.add_argument(
        "--master", help="Spark master (default local[*]; under spark-submit, its --master)"
    )
    parser.add_argument(
        "--conf",
        action="append",
        type=_conf_pair,
        default=[],
        metavar="KEY=VALUE",
        help="Spark configuration, repeatable (e.g. spark.driver.memory=4g)",
    )
    parser.add_argument("--no-bindings", action="store_true", help="skip per-binding attribution")
    parser.add_argument(
        "--no-recorded",
        action="store_true",
        help="do not compare with the queues the broker recorded (reads less of each line)",
    )
    parser.add_argument("--no-report", action="store_true", help="write Parquet tables only")
    parser.add_argument(
        "--rows",
        action="store_true",
        help="read every message row of the segments instead of the counts beside them "
        "(slower, same tables)",
    )
    parser.add_argument("--top", type=int, default=20, help="rows per table in the HTML report")
    parser.add_argument("--ui", action="store_true", help="start Spark's web UI (off by default)")
    parser.add_argument(
        "--driver-keys",
        type=int,
        default=JobOptions.driver_keys,
        metavar="N",
        help="route on the driver up to N distinct keys, in Spark above (default %(default)s)",
    )
    parser.add_argument(
        "--driver-groups",
        type=int,
        default=JobOptions.driver_groups,
        metavar="N",
        help="derive the tables on the driver up to N key-minute groups, in Spark above "
        "(default %(default)s)",
    )


def options_from_args(
    args: argparse.Namespace,
    topology: TopologySource | None = None,
    proposed: TopologySource | None = None,
) -> JobOptions:
    """Options from parsed arguments; ``topology``/``proposed`` replace the paths given
    (``leveret analyze`` passes the dump objects it read from a data dir: the topology is
    then named after that directory)."""
    return JobOptions(
        trace=tuple(args.trace),
        topology=_named(topology, args.topology) or args.topology,
        proposed=_named(proposed, args.proposed),
        out=Path(args.out),
        master=args.master,
        conf=dict(args.conf),
        bindings=not args.no_bindings,
        recorded=not args.no_recorded,
        report=not args.no_report,
        rows=args.rows,
        top=args.top,
        ui=args.ui,
        driver_keys=args.driver_keys,
        driver_groups=args.driver_groups,
    )


def _named(objects: TopologySource | None, path: str | None) -> TopologySource | None:
    """Dump objects read from the data dir ``path``, as a topology named after it."""
    if objects is None:
        return path
    if isinstance(objects, str | Path | Topology) or path is None:
        return objects
    return from_dump(objects, name=f"{path} (Leveret data dir)")
