"""The Spark pipeline's benchmark: synthetic traces against 10k bindings, and the issue's targets.

    .venv/bin/python bench/pipeline_bench.py                 # generate (once), then run the job
    .venv/bin/python bench/pipeline_bench.py generate --messages 50000000 --dir /tmp/lpb-50
    .venv/bin/python bench/pipeline_bench.py run --repeat 3  # one session: fresh JVM, then warm
    .venv/bin/python bench/pipeline_bench.py fresh --repeat 3    # `leveret analyze`, wall clock
    .venv/bin/python bench/pipeline_bench.py marginal --dir D10 --large D50 --repeat 2
    .venv/bin/python bench/pipeline_bench.py scaling --dir D50 --repeat 2   # local[1] vs [2]

Workload (the seeds' topic-exchange mix of ``topicwords.py``, as ``loadgen/topic.py`` binds it):
10,000 bindings on one topic exchange, binding keys of 3-7 words, each word a literal from a
1,000-word vocabulary (70 %), ``*`` (20 %) or ``#`` (10 %, never two in a row), the first word
always a literal; bindings spread round-robin over 100 queues. Routing keys are made from
randomly chosen binding keys (``*`` -> one word, ``#`` -> 0-2 words): 10,000 of them, plus
1,000 keys of random words (mostly unroutable). Messages pick a key uniformly, 10M per hour
(``--hours``: a 50M trace spans five hours); each row carries the queues the broker would have
recorded.

The trace is written in the broker's format (schema version 3: segments of
``trace-*.parquet`` with their ``keys-*.parquet``, through ``leveret.trace.Segment``), one
segment per five minutes as the recorder rolls them, one process per core; the topology as
``leveret log dump`` lines. Modes:

* ``run``: one Spark session (``local[2]`` by default), the job ``--repeat`` times: the first
  run is the fresh-JVM one, the next ones warm; messages / seconds of ``job.run`` (Spark's
  start-up reported apart).
* ``fresh``: ``leveret analyze`` as a user runs it, a new process (and JVM) each time; wall
  clock from process start to report written.
* ``marginal``: one session, the job on ``--dir`` and ``--large`` alternately after a
  warm-up; the slope (extra messages / extra seconds) is the marginal throughput.
* ``scaling``: ``run`` on ``--dir`` with ``local[1]`` and ``local[2]``, interleaved, each in
  its own process; the speed-up of the best warm runs.

Results and how to read them: ``bench/PIPELINE.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
# bench/profile.py would shadow the standard library's profile (which pyspark imports).
sys.path[:] = [str(ROOT)] + [p for p in sys.path if Path(p or ".").resolve() != HERE]

from bench.topicwords import binding_words, vocabulary  # noqa: E402
from leveret.exchanges.model import (  # noqa: E402
    Binding,
    BindingAdded,
    DestKind,
    Event,
    Exchange,
    ExchangeDeclared,
    ExchangeType,
    Queue,
    QueueDeclared,
)
from leveret.exchanges.routing import route  # noqa: E402
from leveret.trace import SCHEMA_VERSION  # noqa: E402

DEFAULT_DIR = Path(os.environ.get("TMPDIR", "/tmp")) / "leveret-pipeline-bench"
EXCHANGE = "bench.topic"
T0 = 1_763_779_980  # 2025-11-22 02:53:00 UTC


def routing_key_from(rng: random.Random, words: list[str], vocab: list[str]) -> str:
    """A routing key matching ``words``: ``*`` -> one word, ``#`` -> 0-2 words."""
    out: list[str] = []
    for w in words:
        if w == "*":
            out.append(rng.choice(vocab))
        elif w == "#":
            out.extend(rng.choice(vocab) for _ in range(rng.randint(0, 2)))
        else:
            out.append(w)
    return ".".join(out)


def workload(
    bindings: int, queues: int, keys: int, stray: int, vocab_size: int, seed: int
) -> tuple[list[Event], list[tuple[str, list[str]]]]:
    """Topology events and ``(routing_key, queues reached)`` for every distinct key."""
    rng = random.Random(f"leveret-pipeline-bench/{seed}/{bindings}/{vocab_size}/{queues}")
    vocab = vocabulary(vocab_size)
    events: list[Event] = [ExchangeDeclared(Exchange(EXCHANGE, ExchangeType.TOPIC))]
    events += [QueueDeclared(Queue(f"q{i}", durable=True)) for i in range(queues)]
    patterns = []
    for i in range(bindings):
        words = binding_words(rng, vocab)
        patterns.append(words)
        binding = Binding(EXCHANGE, f"q{i % queues}", DestKind.QUEUE, ".".join(words))
        events.append(BindingAdded(binding))
    routing_keys = {routing_key_from(rng, rng.choice(patterns), vocab) for _ in range(keys)}
    while len(routing_keys) < keys:
        routing_keys.add(routing_key_from(rng, rng.choice(patterns), vocab))
    strays = {".".join(rng.choice(vocab) for _ in range(rng.randint(2, 5))) for _ in range(stray)}
    from leveret.pipeline.topology import empty_projection

    projection = empty_projection()
    for event in events:
        projection.apply(event)
    mix = [(key, sorted(route(projection, EXCHANGE, key))) for key in sorted(routing_keys | strays)]
    return events, mix


# -- generate ----------------------------------------------------------------------------------


def _write_segment(job: tuple[Path, int, int, int, float, list[tuple[str, list[str]]]]) -> int:
    """One segment (``trace-*.parquet`` and its ``keys-*.parquet``) of consecutive messages,
    written by the recorder's own ``leveret.trace.Segment`` (dictionary, row groups, files);
    the rows are built with NumPy, a million at a time, instead of from publish records."""
    import numpy as np
    import pyarrow as pa

    from leveret.trace import Segment, schemas

    path, start, stop, total, hours, mix = job
    segment = Segment(path)
    keys = np.array([segment.key("/", EXCHANGE, key, None) for key, _ in mix], dtype=np.int64)
    queue_sets = np.array([segment.queue_set(queues) for _, queues in mix], dtype=np.int64)
    rows_schema, _, _ = schemas()
    for first in range(start, stop, 1_000_000):
        m = np.arange(first, min(stop, first + 1_000_000), dtype=np.int64)
        pick = (m * 2_654_435_761) % len(mix)
        micros = T0 * 1_000_000 + (m * round(hours * 3_600_000_000)) // total
        batch = pa.record_batch(
            [
                pa.array(micros).view(pa.timestamp("us", tz="UTC")),
                pa.array(keys[pick]),
                pa.array(queue_sets[pick]),
                pa.array(100 + m % 900),
                pa.array((1 + m % 2).astype(np.int16)),
            ],
            schema=rows_schema,
        )
        segment.append(batch)
    segment.close()
    return path.stat().st_size


def generate(args: argparse.Namespace) -> dict[str, Any]:
    """Write ``DIR/trace/{trace,keys}-*.parquet`` and ``DIR/topology.jsonl``; return what was
    made. ``--files`` segments of consecutive messages, written by one process per core."""
    from multiprocessing import Pool

    from leveret.storage.records import event_to_json

    directory: Path = args.dir
    started = time.perf_counter()
    events, mix = workload(args.bindings, args.queues, args.keys, args.stray, args.vocab, args.seed)
    directory.mkdir(parents=True, exist_ok=True)
    with (directory / "topology.jsonl").open("w") as out:
        for event in events:
            out.write(json.dumps(event_to_json("/", event), sort_keys=True) + "\n")
    trace = directory / "trace"
    trace.mkdir(parents=True, exist_ok=True)
    for old in [*trace.glob("trace-*"), *trace.glob("keys-*")]:
        old.unlink()
    n = args.messages
    hours = args.hours if args.hours else n / 10_000_000
    files = args.files or max(1, round(12 * hours))
    jobs = [
        (trace / f"trace-20251122T025300-{i + 1:04d}.parquet", i * n // files, (i + 1) * n // files)
        for i in range(files)
    ]
    with Pool(os.cpu_count() or 1) as pool:
        sizes = pool.map(_write_segment, [(path, a, b, n, hours, mix) for path, a, b in jobs])
    info = {
        "trace_version": SCHEMA_VERSION,
        "messages": n,
        "bindings": args.bindings,
        "queues": args.queues,
        "distinct_keys": len(mix),
        "unroutable_keys": sum(1 for _, q in mix if not q),
        "mean_fanout": round(sum(len(q) for _, q in mix) / len(mix), 3),
        "hours": hours,
        "files": files,
        "bytes": sum(sizes),
        "dictionary_bytes": sum(f.stat().st_size for f in trace.glob("keys-*")),
        "seconds": round(time.perf_counter() - started, 1),
    }
    (directory / "workload.json").write_text(json.dumps(info, indent=2))
    return info


# -- run ---------------------------------------------------------------------------------------


def run_job(args: argparse.Namespace) -> dict[str, Any]:
    """Time ``leveret.pipeline.job.run`` on the generated trace (in this process: call it fresh)."""
    import logging

    from leveret.pipeline import job, session

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", datefmt="%H:%M:%S")
    logging.getLogger("py4j").setLevel(logging.WARNING)
    conf = {"spark.driver.memory": args.driver_memory, "spark.ui.enabled": "false"}
    conf.update(dict(args.conf))
    started = time.perf_counter()
    spark = session.spark_session(args.master, conf)
    spark.sparkContext.setLogLevel("ERROR")
    startup = time.perf_counter() - started
    runs = []
    for i in range(args.repeat):
        options = job.JobOptions(
            trace=[str(args.dir / "trace")],
            topology=str(args.dir / "topology.jsonl"),
            out=args.dir / f"out-{i}",
            bindings=not args.no_bindings,
            recorded=not args.no_recorded,
            report=not args.no_report,
            rows=args.rows,
        )
        summary = job.run(options, spark)
        runs.append(
            {
                "seconds": summary["seconds"],
                "messages_per_second": summary["messages_per_second"],
                "stage_seconds": summary["stage_seconds"],
            }
        )
    spark.stop()
    best = min(runs, key=lambda r: r["seconds"])
    return {
        "master": args.master,
        "messages": summary["messages"],
        "unroutable_messages": summary["unroutable_messages"],
        "distinct_keys": summary["distinct_keys"],
        "spark_startup_seconds": round(startup, 1),
        "runs": runs,
        "best_seconds": best["seconds"],
        "best_messages_per_second": best["messages_per_second"],
        "bindings_attribution": not args.no_bindings,
        "recorded_comparison": not args.no_recorded,
        "tables_on": summary.get("tables_on"),
        "read": summary.get("read"),
        "key_minute_groups": summary.get("key_minute_groups"),  # tables in Spark
        "driver_rows": summary.get("driver_rows"),  # tables on the driver
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
    }


def fresh(args: argparse.Namespace) -> dict[str, Any]:
    """``leveret analyze`` in a new process each time: seconds from process start to exit
    (report written)."""
    walls = []
    for i in range(args.repeat):
        argv = [sys.executable, "-m", "leveret", "analyze", "--trace", str(args.dir / "trace")]
        argv += [
            "--topology",
            str(args.dir / "topology.jsonl"),
            "--out",
            str(args.dir / f"fresh-{i}"),
        ]
        argv += ["--master", args.master, "--conf", f"spark.driver.memory={args.driver_memory}"]
        argv += ["--rows"] if args.rows else []
        for key, value in args.conf:
            argv += ["--conf", f"{key}={value}"]
        started = time.perf_counter()
        done = subprocess.run(argv, capture_output=True, text=True, check=False)
        walls.append(round(time.perf_counter() - started, 2))
        if done.returncode != 0:
            raise SystemExit(done.stderr[-3000:])
        summary = json.loads((args.dir / f"fresh-{i}" / "summary.json").read_text())
        print(json.dumps({"wall_seconds": walls[-1], "job_seconds": summary["seconds"],
                          "stage_seconds": summary["stage_seconds"]}), flush=True)  # fmt: skip
    return {"fresh_wall_seconds": walls, "best": min(walls), "master": args.master}


def _run_in_process(args: argparse.Namespace, directory: Path, master: str) -> dict[str, Any]:
    argv = [sys.executable, __file__, "run", "--dir", str(directory), "--master", master]
    argv += ["--repeat", str(args.repeat + 1), "--driver-memory", args.driver_memory]
    argv += ["--rows"] if args.rows else []
    for key, value in args.conf:
        argv += ["--conf", f"{key}={value}"]
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(done.stderr[-3000:])
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def scaling(args: argparse.Namespace) -> dict[str, Any]:
    """``local[1]`` against ``local[2]`` on ``--dir``: warm runs (the first run of each
    session left out), the two masters interleaved, each session in its own process."""
    best: dict[str, list[float]] = {"local[1]": [], "local[2]": []}
    for _ in range(2):
        for master in best:
            result = _run_in_process(args, args.dir, master)
            warm = [r["seconds"] for r in result["runs"][1:]]
            best[master].append(min(warm))
            print(json.dumps({"master": master, "warm_seconds": warm}), flush=True)
    one, two = min(best["local[1]"]), min(best["local[2]"])
    return {"best_warm_seconds": {"local[1]": one, "local[2]": two}, "speedup": round(one / two, 2)}


def marginal(args: argparse.Namespace) -> dict[str, Any]:
    """One ``local[2]`` session: a warm-up run on ``--dir``, then ``--dir`` and ``--large``
    alternately ``--repeat`` times; the slope between the best of each."""
    import logging

    from leveret.pipeline import job, session

    logging.basicConfig(level=logging.WARNING)
    conf = {"spark.driver.memory": args.driver_memory, **dict(args.conf)}
    spark = session.spark_session(args.master, conf)
    spark.sparkContext.setLogLevel("ERROR")

    def once(directory: Path) -> tuple[int, float]:
        options = job.JobOptions(
            trace=[str(directory / "trace")],
            topology=str(directory / "topology.jsonl"),
            out=directory / "out-marginal",
            progress_interval=0,
            rows=args.rows,
        )
        summary = job.run(options, spark)
        print(json.dumps({"dir": str(directory), "seconds": summary["seconds"],
                          "stages": summary["stage_seconds"]}), flush=True)  # fmt: skip
        return summary["messages"], summary["seconds"]

    once(args.dir)  # warm-up
    small: list[tuple[int, float]] = []
    large: list[tuple[int, float]] = []
    for _ in range(args.repeat):
        small.append(once(args.dir))
        large.append(once(args.large))
    spark.stop()
    (n_small, t_small), (n_large, t_large) = (
        min(small, key=lambda r: r[1]),
        min(large, key=lambda r: r[1]),
    )
    return {
        "small": {"messages": n_small, "seconds": [r[1] for r in small]},
        "large": {"messages": n_large, "seconds": [r[1] for r in large]},
        "marginal_messages_per_second": round((n_large - n_small) / max(t_large - t_small, 1e-9)),
    }


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "command",
        nargs="?",
        choices=["all", "generate", "run", "fresh", "marginal", "scaling"],
        default="all",
    )
    parser.add_argument("--large", type=Path, help="marginal: the larger workload directory")
    parser.add_argument("--hours", type=float, help="trace span (default: 1 per 10M messages)")
    parser.add_argument("--dir", type=Path, default=DEFAULT_DIR, help="workload directory")
    parser.add_argument("--messages", type=int, default=10_000_000)
    parser.add_argument("--bindings", type=int, default=10_000)
    parser.add_argument("--queues", type=int, default=100)
    parser.add_argument("--keys", type=int, default=10_000, help="distinct routable keys")
    parser.add_argument("--stray", type=int, default=1_000, help="random-word keys")
    parser.add_argument("--vocab", type=int, default=1_000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--files", type=int, help="segments (default: one per 5 minutes, as the recorder rolls)"
    )
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--driver-memory", default="2g")
    parser.add_argument("--conf", action="append", default=[], type=lambda s: s.split("=", 1))
    parser.add_argument(
        "--repeat", type=lambda v: max(1, int(v)), default=1, help="job runs in the same JVM"
    )
    parser.add_argument("--no-bindings", action="store_true")
    parser.add_argument("--no-recorded", action="store_true")
    parser.add_argument("--no-report", action="store_true")
    parser.add_argument(
        "--rows", action="store_true", help="the job reads every row, not the segments' counts"
    )
    parser.add_argument("--regenerate", action="store_true", help="rewrite the trace")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command in ("all", "generate"):
        marker = args.dir / "workload.json"
        stale = (
            not marker.exists()
            or json.loads(marker.read_text()).get("trace_version") != SCHEMA_VERSION
        )
        if args.command == "generate" or args.regenerate or stale:
            print(json.dumps({"generated": generate(args)}), flush=True)
        else:
            print(json.dumps({"reused": json.loads(marker.read_text())}), flush=True)
    if args.command == "all":
        # The job in a fresh interpreter and JVM: nothing warm from generation.
        forwarded = [a for a in (argv if argv is not None else sys.argv[1:]) if a != "all"]
        result = subprocess.run([sys.executable, __file__, "run", *forwarded], check=False)
        return result.returncode
    if args.command == "run":
        print(json.dumps(run_job(args)), flush=True)
    elif args.command == "fresh":
        print(json.dumps(fresh(args)), flush=True)
    elif args.command == "marginal":
        if args.large is None:
            raise SystemExit("marginal needs --large DIR (a larger trace, e.g. 50M messages)")
        print(json.dumps(marginal(args)), flush=True)
    elif args.command == "scaling":
        print(json.dumps(scaling(args)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
