"""The Spark pipeline's benchmark: a synthetic 10M-message trace against 10k bindings.

    .venv/bin/python bench/pipeline_bench.py                 # generate (once), then run the job
    .venv/bin/python bench/pipeline_bench.py generate        # only write the trace + topology
    .venv/bin/python bench/pipeline_bench.py run --repeat 2  # only time the job (fresh JVM)

Workload (the seeds' topic-exchange mix of ``topicwords.py``, as ``loadgen/topic.py`` binds it):
10,000 bindings on one topic exchange, binding keys of 3-7 words, each word a literal from a
1,000-word vocabulary (70 %), ``*`` (20 %) or ``#`` (10 %, never two in a row), the first word
always a literal; bindings spread round-robin over 100 queues. Routing keys are made from
randomly chosen binding keys (``*`` -> one word, ``#`` -> 0-2 words): 10,000 of them, plus
1,000 keys of random words (mostly unroutable). Messages pick a key uniformly and are spread
evenly over one hour; every line carries the queues the broker would have recorded.

The trace is written in the broker's format (schema version 2: ``leveret.trace.message_line``
and a ``KeyIndex`` per file, so ``trace-*.jsonl`` files each with their ``keys-*.jsonl``), one
process per core, and the topology as ``leveret log dump`` lines. Generation and the job are
timed separately; the job runs in a fresh process (``local[2]`` by default) so that nothing
is warm from generation. The figure is messages in the trace / seconds of ``job.run``
(Spark start-up is reported apart). Results and how to read them: ``bench/PIPELINE.md``.
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


def _write_file(job: tuple[Path, int, int, int, list[tuple[str, list[str]]]]) -> int:
    """One ``trace-*.jsonl`` with its ``keys-*.jsonl``, lines encoded by ``broker/trace.py``."""
    from leveret.trace import KeyIndex, message_line

    trace_path, start, stop, total, mix = job
    index = KeyIndex()
    fields = [("/", EXCHANGE, key, None, tuple(queues)) for key, queues in mix]
    step = 3600.0 / total
    size = 0
    with trace_path.open("w") as out:
        lines = []
        for m in range(start, stop):
            ident, fragment = index.lookup(fields[(m * 2_654_435_761) % len(mix)])
            lines.append(message_line(T0 + m * step, ident, 100 + m % 900, 1 + m % 2, fragment))
            if len(lines) == 100_000:
                size += out.write("\n".join(lines) + "\n")
                lines.clear()
        if lines:
            size += out.write("\n".join(lines) + "\n")
    keys_path = trace_path.with_name("keys-" + trace_path.name[len("trace-") :])
    keys_path.write_text("\n".join(index.pending) + "\n")
    return size


def generate(args: argparse.Namespace) -> dict[str, Any]:
    """Write ``DIR/trace/{trace,keys}-*.jsonl`` and ``DIR/topology.jsonl``; return what was made.

    The lines are the broker's (``leveret.trace.message_line`` and ``KeyIndex``), written by one
    process per core, ``--files`` pairs of files of consecutive messages.
    """
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
    n, files = args.messages, args.files
    jobs = [
        (trace / f"trace-20251122T025300-{i + 1:04d}.jsonl", i * n // files, (i + 1) * n // files)
        for i in range(files)
    ]
    with Pool(os.cpu_count() or 1) as pool:
        sizes = pool.map(_write_file, [(path, a, b, n, mix) for path, a, b in jobs])
    info = {
        "trace_version": SCHEMA_VERSION,
        "messages": n,
        "bindings": args.bindings,
        "queues": args.queues,
        "distinct_keys": len(mix),
        "unroutable_keys": sum(1 for _, q in mix if not q),
        "mean_fanout": round(sum(len(q) for _, q in mix) / len(mix), 3),
        "files": files,
        "bytes": sum(sizes),
        "index_bytes": sum(f.stat().st_size for f in trace.glob("keys-*")),
        "seconds": round(time.perf_counter() - started, 1),
    }
    (directory / "workload.json").write_text(json.dumps(info, indent=2))
    return info


# -- run ---------------------------------------------------------------------------------------


def run_job(args: argparse.Namespace) -> dict[str, Any]:
    """Time ``leveret.pipeline.job.run`` on the generated trace (in this process: call it fresh)."""
    import logging

    from leveret.pipeline import job

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", datefmt="%H:%M:%S")
    logging.getLogger("py4j").setLevel(logging.WARNING)
    conf = {"spark.driver.memory": args.driver_memory, "spark.ui.enabled": "false"}
    conf.update(dict(args.conf))
    started = time.perf_counter()
    spark = job.spark_session(args.master, conf)
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
            index=not args.no_index,
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
        "indexed": summary.get("indexed"),
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
    }


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("command", nargs="?", choices=["all", "generate", "run"], default="all")
    parser.add_argument("--dir", type=Path, default=DEFAULT_DIR, help="workload directory")
    parser.add_argument("--messages", type=int, default=10_000_000)
    parser.add_argument("--bindings", type=int, default=10_000)
    parser.add_argument("--queues", type=int, default=100)
    parser.add_argument("--keys", type=int, default=10_000, help="distinct routable keys")
    parser.add_argument("--stray", type=int, default=1_000, help="random-word keys")
    parser.add_argument("--vocab", type=int, default=1_000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--files", type=int, default=16, help="trace files to write")
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--driver-memory", default="2g")
    parser.add_argument("--conf", action="append", default=[], type=lambda s: s.split("=", 1))
    parser.add_argument(
        "--repeat", type=lambda v: max(1, int(v)), default=1, help="job runs in the same JVM"
    )
    parser.add_argument("--no-bindings", action="store_true")
    parser.add_argument("--no-recorded", action="store_true")
    parser.add_argument(
        "--no-index", action="store_true", help="read every field of every line (no key index)"
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
    return 0


if __name__ == "__main__":
    sys.exit(main())
