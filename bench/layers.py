#!/usr/bin/env python3
"""Where the broker's CPU goes, by layer: py-spy samples of ``leveret serve`` under a
workload of the load generator, each sample attributed to one layer of Leveret.

  .venv/bin/python bench/layers.py                                 # pubsub-noack, pure build
  .venv/bin/python bench/layers.py --workloads pubsub-noack,pubsub-ack,fanout
  .venv/bin/python bench/layers.py --leveret-build compiled=build/compiled
  .venv/bin/python bench/layers.py --quick                         # smoke run, few samples

Needs py-spy (``pip install -e '.[bench]'``) and the right to read the broker's memory
(root, or ptrace_scope 0). For each build and workload: start ``python -m leveret serve``
(as ``run.py`` does: a free port, a fresh --data-dir; ``--leveret-build NAME=DIR`` puts DIR,
a directory holding a built ``leveret`` package, first on PYTHONPATH), start
``py-spy record --native --rate 250 --format raw -p PID``, run the workload's script from
``bench/workloads.py`` against it, stop py-spy (SIGINT) and the broker. Writes
``bench/results/layers-<workload>-<build>.md`` (the share per layer) next to
``layers-<workload>-<build>.raw`` (py-spy's collapsed stacks, one ``frame;frame;... count``
line per distinct stack, root first), and with several workloads or builds one combined
table, ``bench/results/layers.md`` (rows layers, columns workload). Sampling slows the
broker (py-spy pauses it to read each stack): the throughput under the profiler is printed
but is not a benchmark figure; the shares are what counts.

The layers (issue 34):

- frame decoding: ``leveret.wire.codec.reader``, ``leveret.wire.codec.frames``, pamqp
- wire connection + channel: ``leveret.wire.connection``, ``leveret.wire.channel``
- session: ``leveret.session``
- queue: ``leveret.node.queue``
- message: ``leveret.node.message``
- routing: ``leveret.exchanges`` and ``VHost.publish`` of ``leveret.node.vhost``
- delivery encoding: ``leveret.wire.codec.writer``
- event loop + transport: asyncio, uvloop (its Cython ``loop.c`` and libuv's C files),
  selectors, and CPython's ``_asyncio``, ``select`` and ``_socket`` modules
- syscalls: send/recv/read/write/writev/readv/epoll/poll wrappers (libc or the kernel)
- other: everything else (the rest of ``leveret``, the interpreter alone, storage threads)

The rule: a sample whose leaf is a syscall wrapper (the innermost named native frame, past
unnamed addresses in libc) is a syscall, whoever called it. Any other sample goes to the
innermost (leaf-most) frame that maps to a layer: a ``dict`` lookup inside
``Queue.publish`` is the queue's, a ``memcpy`` under ``FrameReader._feed`` is decoding, and
a helper of an unmapped module counts for the layer of its nearest mapped caller; a sample
with no mapped frame at all is "other", and so is one whose innermost mapped frame is the
event loop's (always at the root) when a frame of the rest of ``leveret`` (a module of no
layer: a timer callback, the memory monitor) is on the way: the loop only called it.
Samples of a thread waiting on a lock or a condition (the GIL, a thread pool's idle worker:
``pthread_cond_*``, ``PyThread_acquire_lock*``, ``sem_*``, ``take_gil`` on the stack) use no
CPU and are left out of the shares (their count is printed).

Frames are mapped to modules from any of: a Python file path (installed,
``leveret/wire/codec/reader.py``, or this repository's folders as an editable install
shows them, ``broker/wire/codec/reader.py``), a native frame's file (a C extension
``leveret/wire/codec/reader.cpython-311-x86_64-linux-gnu.so``, a C file ``.../reader.c``),
or a mypyc-compiled function's C name: mypyc names native functions ``CPyDef_<module
suffix>___<Class>___<method>`` (and their Python wrappers ``CPyPy_...``), ``.`` written as
``___`` and the module reduced to its shortest suffix unique in the compiled group, e.g.
``CPyDef_reader___FrameReader____feed`` for ``leveret.wire.codec.reader``'s
``FrameReader._feed``. The compiled modules are those with a ``.so`` in the build's
``leveret/``; from that list the prefixes are computed as mypyc computes them, so a name is
read back exactly. Failing that (a name of no known prefix), the suffix is looked up among
the modules of this repository's ``leveret`` (checked against the names each module
defines). Either way the mapping holds whether the group's code lives in one shared
``*__mypyc`` library or in one ``.so`` per module. mypyc's runtime helpers (``CPy_*``,
``CPyTagged_*``, ...) and CPython's C API map to no layer: they count for the compiled
function that called them. Checked once against a real build (mypy 2.4.1's mypyc on
``reader.py`` and ``writer.py`` alone, py-spy 0.4.3): py-spy showed
``CPyDef_reader___FrameReader____feed (__native_<hash>.c:5055)``, the C file naming no
module, and every sample with a compiled frame went to decoding or encoding.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from run import git_revision, loadavg, parse_builds
from workloads import (
    REPO_ROOT,
    RESULTS_DIR,
    WORKLOADS,
    LeveretProcess,
    default_python,
    describe_build,
    run_script,
)

DECODING = "frame decoding"
WIRE = "wire connection + channel"
SESSION = "session"
QUEUE = "queue"
MESSAGE = "message"
ROUTING = "routing"
ENCODING = "delivery encoding"
LOOP = "event loop + transport"
SYSCALLS = "syscalls"
OTHER = "other"
LAYERS = [DECODING, WIRE, SESSION, QUEUE, MESSAGE, ROUTING, ENCODING, LOOP, SYSCALLS, OTHER]
WAITING = "waiting (no CPU, left out)"

# leveret modules (dotted, longest prefix wins) -> layer.
MODULE_LAYERS = {
    "leveret.wire.codec.reader": DECODING,
    "leveret.wire.codec.frames": DECODING,
    "leveret.wire.codec.writer": ENCODING,
    "leveret.wire.connection": WIRE,
    "leveret.wire.channel": WIRE,
    "leveret.session": SESSION,
    "leveret.node.queue": QUEUE,
    "leveret.node.message": MESSAGE,
    "leveret.exchanges": ROUTING,
}
# (module, qualified function) -> layer, before MODULE_LAYERS.
FUNCTION_LAYERS = {("leveret.node.vhost", "VHost.publish"): ROUTING}
# This repository's folders -> their place in the installed package (pyproject's package-dir).
SOURCE_FOLDERS = {"broker": (), "exchanges": ("exchanges",), "storage": ("storage",)}
SOURCE_FOLDERS["pipeline"] = ("pipeline",)

# Python packages and native files of the event loop and the transport.
LOOP_PYTHON = ("asyncio", "uvloop")
LOOP_PY_FILES = {"selectors.py"}
# uvloop's Cython module and the libuv sources compiled into it; CPython's C modules.
LOOP_NATIVE = {
    "loop.c",
    "core.c",
    "stream.c",
    "linux.c",
    "loop-watcher.c",
    "uv-common.c",
    "tcp.c",
    "timer.c",
    "async.c",
    "poll.c",
    "signal.c",
    "threadpool.c",
    "_asynciomodule.c",
    "selectmodule.c",
    "socketmodule.c",
}
LOOP_LIBRARIES = ("loop.cpython-", "_asyncio.cpython-", "select.cpython-", "_socket.cpython-")
DECODING_PYTHON = ("pamqp",)

SYSCALL_NAMES = {
    "send",
    "sendto",
    "sendmsg",
    "sendmmsg",
    "recv",
    "recvfrom",
    "recvmsg",
    "recvmmsg",
    "read",
    "write",
    "readv",
    "writev",
    "pread",
    "pwrite",
    "epoll_wait",
    "epoll_pwait",
    "epoll_pwait2",
    "epoll_ctl",
    "poll",
    "ppoll",
    "select",
    "pselect",
}
WAIT_NAMES = {
    "pthread_cond_wait",
    "pthread_cond_timedwait",
    "pthread_cond_clockwait",
    "PyThread_acquire_lock",
    "PyThread_acquire_lock_timed",
    "sem_wait",
    "sem_timedwait",
    "sem_clockwait",
    "take_gil",
    "PyCOND_WAIT",
    "PyCOND_TIMEDWAIT",
}
MYPYC_PREFIXES = ("CPyDef_", "CPyPy_")
EXTENSION_SUFFIX = re.compile(r"(\.cpython-[^/]*)?\.(so|c|h|py)(\.\d+)*$")
ADDRESS = re.compile(r"^0x[0-9a-f]+$")


@dataclass(frozen=True)
class Frame:
    """One frame of py-spy's raw output: ``name (file:line)``, ``name (file)``; a native
    frame without a symbol is named by its address."""

    name: str
    file: str

    @classmethod
    def parse(cls, text: str) -> Frame:
        name, sep, rest = text.rpartition(" (")
        if not sep:
            return cls(text, "")
        file = rest[:-1] if rest.endswith(")") else rest
        head, colon, tail = file.rpartition(":")
        if colon and tail.isdigit():
            file = head
        return cls(name, file)

    @property
    def anonymous(self) -> bool:
        return bool(ADDRESS.match(self.name))

    @property
    def is_python(self) -> bool:
        return self.file.endswith(".py") or self.file.startswith("<frozen")


def syscall_name(name: str) -> str:
    """``__GI___libc_write``, ``__send``, ``__write_nocancel`` -> ``write``/``send``."""
    name = name.removeprefix("__GI_").lstrip("_").removeprefix("libc_")
    return name.removesuffix("_nocancel").removesuffix("64")


@dataclass
class ModuleIndex:
    """The modules of ``leveret`` (dotted names, from this repository's source) and the
    top-level names each defines: to read mypyc's C names back into modules."""

    defines: dict[str, set[str]] = field(default_factory=dict)

    @classmethod
    def from_source(cls, root: Path = REPO_ROOT) -> ModuleIndex:
        index = cls()
        for folder, prefix in SOURCE_FOLDERS.items():
            for path in sorted((root / folder).rglob("*.py")):
                parts = path.relative_to(root / folder).with_suffix("").parts
                if parts[-1] == "__init__":
                    parts = parts[:-1]
                module = ".".join(("leveret", *prefix, *parts))
                index.defines[module] = top_level_names(path)
        return index

    def by_suffix(self, suffix: list[str]) -> list[str]:
        """Modules whose dotted name ends with the components ``suffix``."""
        n = len(suffix)
        return [m for m in self.defines if m.split(".")[-n:] == suffix]


def top_level_names(path: Path) -> set[str]:
    """Functions and classes defined at the top of a module."""
    try:
        tree = ast.parse(path.read_text())
    except (OSError, SyntaxError, ValueError):
        return set()
    kinds = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
    return {node.name for node in tree.body if isinstance(node, kinds)}


def mypyc_prefixes(modules: list[str]) -> list[tuple[str, str]]:
    """(C-name prefix, module) of modules mypyc compiled in one group, longest prefix first:
    each module's shortest dotted suffix that no other module of the group shares, as a C
    name (mypyc/namegen.py: make_module_translation_map, exported_name). One module alone
    gets no prefix, which says nothing: left to the name lookup."""
    if len(modules) < 2:
        return []

    def suffixes(module: str) -> list[str]:
        parts = module.split(".")
        return [".".join(parts[-i:]) for i in range(1, len(parts) + 1)]

    counts = Counter(s for m in modules for s in suffixes(m))
    prefixes = []
    for module in modules:
        suffix = next((s for s in suffixes(module) if counts[s] == 1), suffixes(module)[-1])
        prefixes.append((suffix.replace("___", "___3_").replace(".", "___") + "___", module))
    return sorted(prefixes, key=lambda p: -len(p[0]))


def compiled_modules(pythonpath: str) -> list[str]:
    """The leveret modules that are C extensions in a build: the ``.so`` files in its
    ``leveret/`` (or, for the venv's editable install, in this repository's folders)."""
    roots = (
        [(Path(pythonpath) / "leveret", ("leveret",))]
        if pythonpath
        else [(REPO_ROOT / f, ("leveret", *prefix)) for f, prefix in SOURCE_FOLDERS.items()]
    )
    modules = []
    for root, package in roots:
        for path in sorted(root.rglob("*.so")) if root.is_dir() else []:
            parts = path.relative_to(root).parts
            stem = EXTENSION_SUFFIX.sub("", parts[-1])
            names = (*parts[:-1], stem) if stem != "__init__" else parts[:-1]
            modules.append(".".join((*package, *names)))
    return modules


def demangle(cname: str) -> list[str]:
    """mypyc's C name without its prefix, as components: ``.`` is ``___`` and a real
    ``___`` was written ``___3_`` (mypyc/namegen.py's exported_name)."""
    for prefix in MYPYC_PREFIXES:
        if cname.startswith(prefix):
            cname = cname[len(prefix) :]
            break
    parts: list[str] = []
    for part in cname.split("___"):
        if parts and part.startswith("3_"):
            parts[-1] += "___" + part[2:]
        else:
            parts.append(part)
    return parts


def layer_of_module(module: str, function: str) -> str:
    """The layer of a leveret module (and function: ``Class.method``); "other" for the
    rest of leveret."""
    if (module, function) in FUNCTION_LAYERS:
        return FUNCTION_LAYERS[module, function]
    best = None
    for prefix, layer in MODULE_LAYERS.items():
        if (module == prefix or module.startswith(prefix + ".")) and (
            best is None or len(prefix) > len(best[0])
        ):
            best = (prefix, layer)
    return best[1] if best else OTHER


def leveret_module_of_path(path: str) -> str | None:
    """A file path's ``leveret`` module, installed or in this repository, or None."""
    stem = EXTENSION_SUFFIX.sub("", path)
    parts = [p for p in stem.split("/") if p and p != "."]
    if parts and parts[-1] == "__init__":
        parts = parts[:-1]
    if "leveret" in parts:
        i = len(parts) - 1 - parts[::-1].index("leveret")
        return ".".join(parts[i:])
    root = REPO_ROOT.parts[1:]
    if tuple(parts[: len(root)]) == root:  # a full path into this repository
        parts = parts[len(root) :]
    elif path.startswith("/"):
        return None
    # relative: py-spy's short name of a file of this repository (an editable install)
    if len(parts) > 1 and parts[0] in SOURCE_FOLDERS:
        return ".".join(("leveret", *SOURCE_FOLDERS[parts[0]], *parts[1:]))
    return None


class Classifier:
    """Attributes py-spy samples to layers (the rule is in the module docstring)."""

    def __init__(self, index: ModuleIndex, compiled: Iterable[str] = ()) -> None:
        self.index = index
        # mypyc's C-name prefix of each compiled module, when the build's .so files say
        # which modules were compiled together: then a name is read back exactly.
        self.prefixes = mypyc_prefixes(sorted(compiled))
        self._frames: dict[Frame, str | None] = {}

    def frame_layer(self, frame: Frame) -> str | None:
        if frame not in self._frames:
            self._frames[frame] = self._frame_layer(frame)
        return self._frames[frame]

    def _frame_layer(self, frame: Frame) -> str | None:
        if frame.name.startswith(MYPYC_PREFIXES):
            return self.mypyc_layer(frame.name)
        module = leveret_module_of_path(frame.file) if frame.file else None
        if module is not None:
            return layer_of_module(module, frame.name if frame.is_python else "")
        if frame.is_python:
            parts = frame.file.split("/")
            if any(p in LOOP_PYTHON for p in parts[:-1]) or parts[-1] in LOOP_PY_FILES:
                return LOOP
            if any(p in DECODING_PYTHON for p in parts[:-1]):
                return DECODING
            return None
        base = frame.file.rsplit("/", 1)[-1]
        if base in LOOP_NATIVE or base.startswith(LOOP_LIBRARIES):
            return LOOP
        return self.extension_layer(base)

    def extension_layer(self, base: str) -> str | None:
        """A native frame in ``reader.cpython-...so`` or ``reader.c`` whose path did not say
        its package: the leveret module of that name, if only one has it."""
        stem = EXTENSION_SUFFIX.sub("", base)
        if stem == base or stem == "__init__":
            return None
        candidates = self.index.by_suffix([stem])
        layers = {layer_of_module(m, "") for m in candidates}
        return layers.pop() if len(layers) == 1 else None

    def mypyc_layer(self, cname: str) -> str | None:
        """The layer of a mypyc-compiled function, from its C name."""
        name = cname.removeprefix(MYPYC_PREFIXES[0]).removeprefix(MYPYC_PREFIXES[1])
        for prefix, module in self.prefixes:  # the longest prefixes first
            if name.startswith(prefix):
                rest = demangle(name[len(prefix) :])
                return layer_of_module(module, ".".join(rest[:2]))
        parts = demangle(cname)
        # The longest module suffix first; then no module part (one module compiled alone).
        for k in range(len(parts) - 1, -1, -1):
            suffix, rest = parts[:k], parts[k:]
            modules = self.index.by_suffix(suffix) if k else list(self.index.defines)
            named = [m for m in modules if rest[0] in self.index.defines[m]]
            if k == 0 or named:
                modules = named
            function = ".".join(rest[:2]) if len(rest) > 1 else rest[0]
            layers = {layer_of_module(m, function) for m in modules}
            if len(layers) == 1:
                return layers.pop()
        return None

    def classify(self, frames: list[Frame]) -> str:
        """The layer of one sample (``frames`` root first, as py-spy writes them)."""
        if any(f.name in WAIT_NAMES for f in frames):
            return WAITING
        for frame in reversed(frames):
            if not frame.anonymous:
                if syscall_name(frame.name) in SYSCALL_NAMES and not frame.is_python:
                    return SYSCALLS
                break
        in_leveret = False  # passed a leveret frame of no layer (OTHER) on the way out
        for frame in reversed(frames):
            layer = self.frame_layer(frame)
            if layer == OTHER:
                in_leveret = True
            elif layer is not None:
                # The loop is at the root of every stack: leveret code of no layer that it
                # called (a timer, the memory monitor) is "other", not the loop's.
                return OTHER if layer == LOOP and in_leveret else layer
        return OTHER


@dataclass
class Profile:
    """Samples per layer of one raw py-spy file, and the leaves of the "other" samples."""

    layers: Counter[str] = field(default_factory=Counter)
    other_leaves: Counter[str] = field(default_factory=Counter)

    @property
    def busy(self) -> int:
        return sum(n for layer, n in self.layers.items() if layer != WAITING)

    def share(self, layer: str) -> float | None:
        return self.layers[layer] / self.busy if self.busy else None


def read_raw(path: Path, classifier: Classifier) -> Profile:
    """Classify every line of py-spy's raw (collapsed stacks) output."""
    profile = Profile()
    for line in path.read_text(errors="replace").splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        frames = [Frame.parse(text) for text in stack.split(";")]
        layer = classifier.classify(frames)
        profile.layers[layer] += int(count)
        if layer == OTHER:
            leaf = next((f for f in reversed(frames) if not f.anonymous), frames[-1])
            profile.other_leaves[f"{leaf.name} ({leaf.file})"] += int(count)
    return profile


# --------------------------------------------------------------------------------------------
# Running a profile
# --------------------------------------------------------------------------------------------
def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def py_spy_executable(python: str) -> str:
    """py-spy next to ``python`` (the venv's) or on PATH; exits with one line if neither."""
    beside = Path(python).parent / "py-spy"
    found = str(beside) if beside.exists() else shutil.which("py-spy")
    if found is None:
        print(
            "bench/layers.py: py-spy not found (pip install -e '.[bench]', or 'py-spy>=0.3.14')",
            file=sys.stderr,
        )
        raise SystemExit(69)
    return found


def record(
    py_spy: str, pid: int, raw: Path, log_path: Path, run: Callable[[], dict[str, Any]]
) -> dict[str, Any]:
    """py-spy on ``pid`` while ``run()`` runs the workload; returns the workload's result."""
    cmd = [py_spy, "record", "--native", "--rate", "250", "--format", "raw"]
    cmd += ["-p", str(pid), "-o", str(raw)]
    with open(log_path, "w") as out:
        spy = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)
        try:
            deadline = time.monotonic() + 20
            while "Sampling process" not in log_path.read_text(errors="replace"):
                if spy.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"py-spy did not start: {log_path.read_text()[-500:]}")
                time.sleep(0.05)
            result = run()
        finally:
            if spy.poll() is None:
                spy.send_signal(signal.SIGINT)  # py-spy writes its output on Ctrl-C
                try:
                    spy.wait(60)
                except subprocess.TimeoutExpired:
                    spy.kill()
                    spy.wait(5)
    return result


def profile_one(
    workload_key: str, build: tuple[str, str], args: argparse.Namespace, index: ModuleIndex
) -> Profile:
    """Profile one build under one workload; write its table and raw stacks."""
    name, pythonpath = build
    classifier = Classifier(index, compiled_modules(pythonpath))
    workload = WORKLOADS[workload_key]
    base = args.results_dir / f"layers-{workload_key}-{name}"
    raw, spy_log = base.with_suffix(".raw"), base.with_suffix(".pyspy.log")
    broker = LeveretProcess(args.python, base.with_suffix(".broker.log"), pythonpath)
    broker.start()
    try:
        assert broker.pid is not None
        cmd = workload.command(
            args.python, broker.url, quick=args.quick, label=f"layers-{name}", broker_pid=broker.pid
        )
        result = record(
            args.py_spy, broker.pid, raw, spy_log, lambda: run_script(cmd, workload.timeout_s + 30)
        )
    finally:
        broker.stop()
        tracebacks = broker.tracebacks()
        broker.close_log()
    if not result.get("ok"):
        raise SystemExit(f"bench/layers.py: {workload_key} failed: {result.get('error')}")
    profile = read_raw(raw, classifier)
    spy_summary = re.findall(r"Samples: \d+ Errors: \d+", spy_log.read_text())
    spy_log.unlink()
    figures = ", ".join(f"{m.label} {result.get(m.field)}" for m in workload.metrics)
    lines = [
        f"# Broker CPU by layer: {workload_key}, build {name}",
        "",
        f"- {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())}, Leveret {args.revision}, "
        f"{os.cpu_count()} CPUs, load before {args.loadavg}; "
        f"{'QUICK (smoke) size; ' if args.quick else ''}`bench/layers.py`",
        f"- build {name}: PYTHONPATH {pythonpath or '(unchanged)'}: "
        f"{describe_build(args.python, pythonpath)}",
        f"- workload: {workload.description}; under the profiler {figures}, broker CPU "
        f"{result.get('broker_cpu_frac_of_1_core')} (sampling slows the broker: not a benchmark)",
        f"- py-spy --native --rate 250: {spy_summary[-1] if spy_summary else '?'}; "
        f"{profile.busy} busy samples, {profile.layers[WAITING]} waiting (left out)",
        f"- raw stacks: `{display_path(raw)}`",
    ]
    if tracebacks:
        log_file = display_path(broker.log_path)
        lines.append(f"- **the broker logged {tracebacks} tracebacks** (`{log_file}`)")
    lines += [
        "",
        markdown_table(["layer", "samples", "share"], layer_rows(profile)),
    ]
    if profile.other_leaves:
        lines += ["", "Most frequent leaves of the samples in 'other':", ""]
        lines += [f"- {n} {leaf}" for leaf, n in profile.other_leaves.most_common(8)]
    text = "\n".join(lines) + "\n"
    base.with_suffix(".md").write_text(text)
    print(text)
    return profile


def layer_rows(profile: Profile) -> list[list[str]]:
    return [
        [layer, str(profile.layers[layer]), fmt_share(profile.share(layer))] for layer in LAYERS
    ]


def fmt_share(share: float | None) -> str:
    return "-" if share is None else f"{100 * share:.1f} %"


def markdown_table(header: list[str], rows: Iterable[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|---|" + "---:|" * (len(header) - 1)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def display_path(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(REPO_ROOT))
    except ValueError:
        return str(path)


def combined_table(profiles: dict[str, Profile]) -> str:
    """Rows layers, columns workload (and build): the shares."""
    rows = [[layer] + [fmt_share(p.share(layer)) for p in profiles.values()] for layer in LAYERS]
    rows.append(["busy samples"] + [str(p.busy) for p in profiles.values()])
    return markdown_table(["layer", *profiles], rows)


# --------------------------------------------------------------------------------------------
# main
# --------------------------------------------------------------------------------------------
def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--workloads",
        default="pubsub-noack",
        help="comma-separated workloads of bench/workloads.py (default pubsub-noack)",
    )
    parser.add_argument(
        "--leveret-build",
        action="append",
        metavar="NAME=PYTHONPATH_DIR",
        help="profile this build (a directory holding the leveret package, first on "
        "PYTHONPATH; empty: the venv's install); repeatable (default: pure=)",
    )
    parser.add_argument("--quick", action="store_true", help="the workloads' small size")
    parser.add_argument("--python", default=default_python(), help="interpreter for Leveret")
    parser.add_argument("--results-dir", type=Path, default=RESULTS_DIR)
    parser.add_argument(
        "--classify",
        type=Path,
        metavar="RAW",
        help="only classify an existing raw py-spy file (of the --leveret-build given)",
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    index = ModuleIndex.from_source()
    if args.classify is not None:
        builds = parse_builds(args.leveret_build)
        classifier = Classifier(index, compiled_modules(builds[0][1]))
        profile = read_raw(args.classify, classifier)
        print(markdown_table(["layer", "samples", "share"], layer_rows(profile)))
        print(json.dumps({"busy": profile.busy, "waiting": profile.layers[WAITING]}))
        return 0
    keys = [k.strip() for k in args.workloads.split(",") if k.strip()]
    unknown = [k for k in keys if k not in WORKLOADS]
    if unknown or not keys:
        print(f"bench/layers.py: --workloads {args.workloads}: unknown {unknown}", file=sys.stderr)
        return 64
    builds = parse_builds(args.leveret_build)
    args.py_spy = py_spy_executable(args.python)
    args.revision, args.loadavg = git_revision(), loadavg()
    args.results_dir.mkdir(parents=True, exist_ok=True)
    profiles: dict[str, Profile] = {}
    for build in builds:
        for key in keys:
            log(f"profiling {key} on build {build[0]} ...")
            column = key if len(builds) == 1 else f"{key} ({build[0]})"
            try:
                profiles[column] = profile_one(key, build, args, index)
            except RuntimeError as exc:  # the broker or py-spy did not start
                print(f"bench/layers.py: {exc}", file=sys.stderr)
                return 70
    if len(profiles) > 1:
        text = "\n".join(
            [
                "# Broker CPU by layer (bench/layers.py)",
                "",
                f"- {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())}, Leveret "
                f"{args.revision}, {os.cpu_count()} CPUs, load before {args.loadavg}; "
                f"builds: {', '.join(f'{n}={p}' for n, p in builds)}"
                f"{'; QUICK (smoke) size' if args.quick else ''}",
                "- share of the busy samples (py-spy --native --rate 250); per run: "
                "`layers-<workload>-<build>.md`",
                "",
                combined_table(profiles),
                "",
            ]
        )
        (args.results_dir / "layers.md").write_text(text)
        print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
