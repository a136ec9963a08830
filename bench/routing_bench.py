"""The routing engine's benchmark: the seeds' experiments on ``exchanges/``, as PNG plots.

    .venv/bin/python bench/routing_bench.py            # full: 1k to 1M bindings (~2 min)
    .venv/bin/python bench/routing_bench.py --quick    # 1k to 100k, fewer points (<1 min),
                                                       # into a temp dir unless --out

Seeds 000/001 timed RabbitMQ's topic routing against the routing key length and against the
number of bindings, with and without a ``#.#`` binding (binding keys 70% words, 20% ``*``,
10% ``#``, never ``##``; a routing key of length n is a binding key of length n with its
wildcards replaced by random strings). Seed 003 says the x-rtopic plugin degrades past
~1,000 bindings and that suffix patterns are "terribly slow". This script runs the same
experiments on ``leveret.exchanges.routing.route`` in process, for topic and for x-rtopic (prefix,
suffix, mixed patterns), plus route() throughput at 100k bindings with the route cache off
(cold) and on (warm). Workload, results and their reading: ``bench/ROUTING.md``.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import random
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from leveret.exchanges.model import (
    Binding,
    BindingAdded,
    BindingRemoved,
    DestKind,
    Exchange,
    ExchangeDeclared,
    ExchangeType,
    Queue,
    QueueDeclared,
)
from leveret.exchanges.patterns import RouteCache
from leveret.exchanges.projection import Projection
from leveret.exchanges.routing import route

# The project is installed editable in the venv (make), so exchanges/ imports from anywhere.
REPO_ROOT = Path(__file__).resolve().parent.parent
RESULTS_DIR = REPO_ROOT / "bench" / "results"
X = "x"
QUEUES = 1000  # binding i goes to queue q{i % QUEUES}
VOCABULARY = 1000  # words w0 .. w999, the same at every position
MAX_WORDS = 12  # binding keys have 1..MAX_WORDS words, uniformly
HASH_HASH = "#.#"

FULL = {
    "sizes": [1_000, 10_000, 100_000, 1_000_000],
    "length_sizes": [1_000, 10_000, 100_000],
    "lengths": list(range(1, MAX_WORDS + 1)),
    "keys": 50,
    "passes": 5,
    "throughput_size": 100_000,
    "throughput_keys": 1_000,
    "warm_seconds": 1.0,
}
QUICK = {
    "sizes": [1_000, 10_000, 100_000],
    "length_sizes": [1_000, 10_000],
    "lengths": list(range(1, 9)),
    "keys": 20,
    "passes": 2,
    "throughput_size": 100_000,
    "throughput_keys": 300,
    "warm_seconds": 0.2,
}

RTOPIC_KINDS = ["prefix", "suffix", "mixed", "mixed+#.#"]
RTOPIC_EXTRA = ["prefix-1", "suffix-1", "infix"]  # one-word anchors, no anchor at all


# -- keys ---------------------------------------------------------------------------------


def word(rnd: random.Random) -> str:
    return f"w{rnd.randrange(VOCABULARY)}"


def topic_binding_key(rnd: random.Random, n: int) -> str:
    """A binding key of n words: 70% words, 20% '*', 10% '#', never two '#' in a row."""
    words: list[str] = []
    for _ in range(n):
        r = rnd.random()
        if r < 0.7:
            words.append(word(rnd))
        elif r < 0.9:
            words.append("*")
        else:
            words.append("#" if not words or words[-1] != "#" else word(rnd))
    return ".".join(words)


def literal_key(rnd: random.Random, n: int) -> str:
    return ".".join(word(rnd) for _ in range(n))


def routing_key_from(rnd: random.Random, binding_key: str) -> str:
    """The seed's routing key: the binding key with each wildcard replaced by a random
    string (not in the vocabulary), so the walk goes through all of its levels."""
    return ".".join(
        f"r{rnd.randrange(10**9)}" if w in ("*", "#") else w for w in binding_key.split(".")
    )


def mixed_pattern(rnd: random.Random, key: str, extra_hash: bool = False) -> str:
    """A binding key with its words replaced 70/20/10 by word/'*'/'#' (never '##'), keeping
    at least one word and one wildcard; ``extra_hash`` inserts a '#.#' at a random place."""
    words: list[str] = []
    for w in key.split("."):
        r = rnd.random()
        if r < 0.7 or (r >= 0.9 and words and words[-1] == "#"):
            words.append(w)
        else:
            words.append("*" if r < 0.9 else "#")
    literal = [i for i, w in enumerate(words) if w not in ("*", "#")]
    if not literal:  # all wildcards is a broadcast, not a mixed pattern: keep one word
        i = rnd.randrange(len(words))
        words[i] = key.split(".")[i]
        if i and words[i - 1] == "#" and i + 1 < len(words) and words[i + 1] == "#":
            words[i + 1] = "*"
    elif len(literal) == len(words):
        words[rnd.randrange(len(words))] = "*"
    if extra_hash:
        words.insert(rnd.randrange(len(words) + 1), HASH_HASH)
    return ".".join(words)


def rtopic_patterns(rnd: random.Random, key: str, kind: str) -> str:
    """A routing pattern of ``kind`` made from the literal binding key ``key``."""
    words = key.split(".")
    if kind == "prefix":
        return ".".join([*words[:-1], "#"])  # n words: n-1 literal, then '#'
    if kind == "suffix":
        return ".".join(["#", *words[1:]])
    if kind == "mixed":
        return mixed_pattern(rnd, key)
    if kind == "mixed+#.#":
        return mixed_pattern(rnd, key, extra_hash=True)
    if kind == "prefix-1":
        return f"{words[0]}.#"
    if kind == "suffix-1":
        return f"#.{words[-1]}"
    if kind == "infix":
        return f"#.{words[len(words) // 2]}.#"
    raise ValueError(kind)


# -- building and timing ------------------------------------------------------------------


def release_memory() -> None:
    """Free what earlier builds left and hand it back to the OS (glibc ``malloc_trim``), so
    the next build's RSS growth is its own."""
    gc.collect()
    try:
        import ctypes

        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


def rss_mb() -> float:
    """Resident set size now (Linux /proc), in MB; 0 elsewhere."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 1e6
    except OSError:
        return 0.0


KEEP_GC = False  # --gc: leave the collector on while building (to measure what it costs)


def build(type_: ExchangeType, binding_keys: Sequence[str]) -> tuple[Projection, dict[str, float]]:
    """A projection with exchange X of ``type_`` and one binding per key, via apply()."""
    release_memory()
    if not KEEP_GC:
        gc.disable()
    before = rss_mb()
    p = Projection()
    p.apply(ExchangeDeclared(Exchange(X, type_)))
    for i in range(QUEUES):
        p.apply(QueueDeclared(Queue(f"q{i}")))
    started = time.perf_counter()
    for i, key in enumerate(binding_keys):
        p.apply(BindingAdded(Binding(X, f"q{i % QUEUES}", DestKind.QUEUE, key)))
    seconds = time.perf_counter() - started
    gc.freeze()  # keep the trie out of every later collection
    gc.enable()
    n = len(binding_keys)
    stats = {"bindings": n, "build_s": seconds, "binds_per_s": n / seconds}
    stats["rss_mb"] = max(0.0, rss_mb() - before)
    return p, stats


def time_routes(p: Projection, keys: Sequence[str], passes: int) -> dict[str, float]:
    """Best-of-``passes`` mean time of route() over ``keys`` (µs), and mean result size."""
    best = float("inf")
    found = 0
    spent = time.perf_counter()
    for _ in range(passes):
        started = time.perf_counter()
        found = 0
        for key in keys:
            found += len(route(p, X, key))
        best = min(best, time.perf_counter() - started)
        if time.perf_counter() - spent > 5.0:  # bound a slow point, keep the run bounded
            break
    return {"us": best / len(keys) * 1e6, "results": found / len(keys)}


def throughput(p: Projection, keys: Sequence[str], warm_seconds: float) -> dict[str, float]:
    """route() calls per second: cold (cache off, one pass) and warm (cache on, repeated)."""
    RouteCache.max_weight = 0
    started = time.perf_counter()
    for key in keys:
        route(p, X, key)
    cold = len(keys) / (time.perf_counter() - started)
    RouteCache.max_weight = SAVED_BOUNDS[1]
    for key in keys:
        route(p, X, key)  # fill the cache
    calls = 0
    started = time.perf_counter()
    while time.perf_counter() - started < warm_seconds:
        for key in keys:
            route(p, X, key)
        calls += len(keys)
    warm = calls / (time.perf_counter() - started)
    RouteCache.max_weight = 0
    return {"cold_per_s": cold, "warm_per_s": warm}


SAVED_BOUNDS = (RouteCache.max_entries, RouteCache.max_weight)


def keys_of_length(keys: Sequence[str], n: int, count: int) -> list[str]:
    return [k for k in keys if k.count(".") == n - 1][:count]


# -- experiments --------------------------------------------------------------------------


def topic_experiments(cfg: dict[str, Any], rnd: random.Random, log: Callable[[str], None]) -> Any:
    out: dict[str, Any] = {"builds": {}, "by_length": {}, "by_bindings": {}, "throughput": {}}
    for size in cfg["sizes"]:
        keys = [topic_binding_key(rnd, rnd.randint(1, MAX_WORDS)) for _ in range(size)]
        p, stats = build(ExchangeType.TOPIC, keys)
        out["builds"][size] = stats
        log(f"topic {size:>9,} bindings: built in {stats['build_s']:.1f} s")
        hh = Binding(X, "q0", DestKind.QUEUE, HASH_HASH)
        for variant in ("plain", HASH_HASH):
            if variant == HASH_HASH:
                p.apply(BindingAdded(hh))
            if size in cfg["length_sizes"]:
                series = out["by_length"].setdefault(f"{size}/{variant}", {})
                for n in cfg["lengths"]:
                    chosen = keys_of_length(keys, n, cfg["keys"])
                    routing = [routing_key_from(rnd, k) for k in chosen]
                    series[n] = time_routes(p, routing, cfg["passes"])
            chosen = keys_of_length(keys, 5, cfg["keys"])
            routing = [routing_key_from(rnd, k) for k in chosen]
            out["by_bindings"].setdefault(variant, {})[size] = time_routes(
                p, routing, cfg["passes"]
            )
            if variant == HASH_HASH:
                p.apply(BindingRemoved(hh))
        if size == cfg["throughput_size"]:
            sample = rnd.sample(keys, cfg["throughput_keys"])
            routing = [routing_key_from(rnd, k) for k in sample]
            out["throughput"]["topic"] = throughput(p, routing, cfg["warm_seconds"])
        del p
    return out


def rtopic_experiments(cfg: dict[str, Any], rnd: random.Random, log: Callable[[str], None]) -> Any:
    out: dict[str, Any] = {"builds": {}, "by_length": {}, "by_bindings": {}, "throughput": {}}
    for size in cfg["sizes"]:
        keys = [literal_key(rnd, rnd.randint(1, MAX_WORDS)) for _ in range(size)]
        p, stats = build(ExchangeType.RTOPIC, keys)
        out["builds"][size] = stats
        log(f"x-rtopic {size:>9,} bindings: built in {stats['build_s']:.1f} s")
        if size in cfg["length_sizes"]:
            for kind in RTOPIC_KINDS:
                series = out["by_length"].setdefault(f"{size}/{kind}", {})
                for n in cfg["lengths"]:
                    if n < 2:
                        continue  # a 1-word prefix or suffix pattern is '#': everything
                    chosen = keys_of_length(keys, n, cfg["keys"])
                    patterns = [rtopic_patterns(rnd, k, kind) for k in chosen]
                    series[n] = time_routes(p, patterns, cfg["passes"])
        for kind in RTOPIC_KINDS + RTOPIC_EXTRA:
            chosen = keys_of_length(keys, 4, cfg["keys"])
            patterns = [rtopic_patterns(rnd, k, kind) for k in chosen]
            out["by_bindings"].setdefault(kind, {})[size] = time_routes(p, patterns, cfg["passes"])
        if size == cfg["throughput_size"]:
            sample = [k for k in rnd.sample(keys, 4 * cfg["throughput_keys"]) if "." in k]
            sample = sample[: cfg["throughput_keys"]]
            for kind in ["prefix", "suffix", "mixed", *RTOPIC_EXTRA]:
                patterns = [rtopic_patterns(rnd, k, kind) for k in sample]
                out["throughput"][kind] = throughput(p, patterns, cfg["warm_seconds"])
        del p
    return out


# -- output -------------------------------------------------------------------------------


def plot(results: dict[str, Any], directory: Path) -> list[Path]:
    """The four PNGs: topic and x-rtopic, against key length and against bindings."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    written: list[Path] = []
    topic, rtopic = results["topic"], results["rtopic"]
    us = "µs per route()"

    def lines(ax: Any, curves: list[tuple[str, dict[Any, Any], str]], title: str) -> None:
        for label, series, style in curves:
            xs = sorted(series, key=int)
            ax.plot([int(x) for x in xs], [series[x]["us"] for x in xs], style, label=label)
        ax.set_title(title)
        ax.set_yscale("log")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)

    def save(fig: Any, name: str) -> None:
        path = directory / f"routing-{name}.png"
        fig.tight_layout()
        fig.savefig(path, dpi=110)
        plt.close(fig)
        written.append(path)

    def hh(variant: str) -> str:
        return " + '#.#'" if variant == HASH_HASH else ""

    fig, ax = plt.subplots(figsize=(7, 4.5))
    curves = []
    for label, series in topic["by_length"].items():
        size, variant = label.split("/")
        style = "o--" if variant == HASH_HASH else "o-"
        curves.append((f"{int(size):,} bindings{hh(variant)}", series, style))
    lines(ax, curves, "topic: routing time vs routing key length")
    ax.set(xlabel="routing key length (words)", ylabel=us)
    save(fig, "topic-length")

    fig, ax = plt.subplots(figsize=(7, 4.5))
    curves = [
        (f"5-word keys{hh(v)}", series, "o--" if v == HASH_HASH else "o-")
        for v, series in topic["by_bindings"].items()
    ]
    lines(ax, curves, "topic: routing time vs bindings (dashed: with a '#.#' binding)")
    ax.set(xlabel="bindings", ylabel=us, xscale="log")
    save(fig, "topic-bindings")

    sizes = sorted({label.split("/")[0] for label in rtopic["by_length"]}, key=int)
    fig, axes = plt.subplots(1, len(sizes), figsize=(5 * len(sizes), 4.5), sharey=True)
    axes = list(axes) if len(sizes) > 1 else [axes]
    for ax, size in zip(axes, sizes, strict=True):
        curves = [(kind, rtopic["by_length"][f"{size}/{kind}"], "o-") for kind in RTOPIC_KINDS]
        lines(ax, curves, f"x-rtopic, {int(size):,} bindings")
        ax.set(xlabel="routing pattern length (words)")
    axes[0].set_ylabel(us)
    save(fig, "rtopic-length")

    fig, ax = plt.subplots(figsize=(7, 4.5))
    curves = [
        (kind, series, "o:" if kind in RTOPIC_EXTRA else "o-")
        for kind, series in rtopic["by_bindings"].items()
    ]
    lines(ax, curves, "x-rtopic: routing time vs bindings (4-word patterns; dotted: others)")
    ax.set(xlabel="bindings", ylabel=us, xscale="log")
    save(fig, "rtopic-bindings")
    return written


def table(results: dict[str, Any]) -> str:
    """The markdown tables of ROUTING.md."""
    topic, rtopic = results["topic"], results["rtopic"]
    sizes = list(topic["builds"])  # ints, or strings when read back from the JSON
    lines = ["| bindings | " + " | ".join(f"{int(s):,}" for s in sizes) + " |"]
    lines.append("|---|" + "---:|" * len(sizes))

    def row(label: str, cells: list[str]) -> None:
        lines.append(f"| {label} | " + " | ".join(cells) + " |")

    def us(series: dict[Any, Any]) -> list[str]:
        return [_fmt_us(series[k]) if k in series else "-" for k in _keys(series, sizes)]

    row("topic: build, bindings/s", [f"{topic['builds'][k]['binds_per_s']:,.0f}" for k in sizes])
    row("topic: memory, MB", [f"{topic['builds'][k]['rss_mb']:,.0f}" for k in sizes])
    row("topic: µs/route, 5-word keys", us(topic["by_bindings"]["plain"]))
    row("topic: µs/route, + '#.#' binding", us(topic["by_bindings"][HASH_HASH]))
    row(
        "x-rtopic: build, bindings/s", [f"{rtopic['builds'][k]['binds_per_s']:,.0f}" for k in sizes]
    )
    row("x-rtopic: memory, MB", [f"{rtopic['builds'][k]['rss_mb']:,.0f}" for k in sizes])
    for kind, series in rtopic["by_bindings"].items():
        row(f"x-rtopic: µs/route, {kind}", us(series))
    lines.append("")
    lines.append("Mean results per route (names):")
    lines.append("")
    lines.append("| shape | " + " | ".join(f"{int(s):,}" for s in sizes) + " |")
    lines.append("|---|" + "---:|" * len(sizes))
    for label, series in [("topic", topic["by_bindings"]["plain"]), *rtopic["by_bindings"].items()]:
        cells = [f"{series[k]['results']:.1f}" for k in _keys(series, sizes)]
        row(label, cells)
    lines.append("")
    size = results["config"]["throughput_size"]
    lines.append(f"route() calls per second at {size:,} bindings:")
    lines.append("")
    lines.append("| exchange, key shape | cold (cache off) | warm (route cache) |")
    lines.append("|---|---:|---:|")
    for label, numbers in [("topic", topic["throughput"]["topic"])] + [
        (f"x-rtopic, {kind}", numbers) for kind, numbers in rtopic["throughput"].items()
    ]:
        lines.append(f"| {label} | {numbers['cold_per_s']:,.0f} | {numbers['warm_per_s']:,.0f} |")
    return "\n".join(lines) + "\n"


def _keys(series: dict[Any, Any], sizes: list[Any]) -> list[Any]:
    return [k for k in sizes if k in series]


def _fmt_us(point: dict[str, float]) -> str:
    value = point["us"]
    return f"{value:,.0f}" if value >= 100 else f"{value:.1f}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="1k-100k, fewer points (<1 min)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--out", type=Path, help="output directory (default: bench/results; --quick: a temp dir)"
    )
    parser.add_argument(
        "--gc", action="store_true", help="keep the garbage collector on while building"
    )
    args = parser.parse_args(argv)
    global KEEP_GC
    KEEP_GC = args.gc
    cfg = QUICK if args.quick else FULL
    if args.out is None:
        # A quick run is a smoke test: it must not overwrite the full run's committed files.
        args.out = Path(tempfile.mkdtemp(prefix="routing-bench-")) if args.quick else RESULTS_DIR
    args.out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()

    def log(message: str) -> None:
        print(f"[{time.perf_counter() - started:6.1f} s] {message}", flush=True)

    RouteCache.max_weight = 0  # every timed route walks the trie (throughput() says otherwise)
    rnd = random.Random(args.seed)
    results: dict[str, Any] = {
        "config": {
            **cfg,
            "quick": args.quick,
            "seed": args.seed,
            "vocabulary": VOCABULARY,
            "gc_during_build": args.gc,
        },
        "machine": {
            "python": platform.python_version(),
            "platform": platform.platform(),
            "cpus": os.cpu_count(),
            "loadavg_before": os.getloadavg(),
        },
    }
    results["topic"] = topic_experiments(cfg, rnd, log)
    results["rtopic"] = rtopic_experiments(cfg, rnd, log)
    results["machine"]["loadavg_after"] = os.getloadavg()
    results["seconds"] = time.perf_counter() - started
    (args.out / "routing-results.json").write_text(json.dumps(results, indent=1))
    markdown = table(results)
    (args.out / "routing-results.md").write_text(markdown)
    written = [args.out / "routing-results.json", args.out / "routing-results.md"]
    written += plot(results, args.out)
    print(markdown)
    for path in written:
        log(f"wrote {path}")
    log("done")
    return 0


if __name__ == "__main__":
    sys.exit(main())
