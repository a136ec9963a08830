#!/usr/bin/env python3
"""kill -9 under confirmed load, against RabbitMQ: ``bench/crash_test.py``'s publish and
consume iterations driving a private RabbitMQ node instead of a Leveret subprocess.

    .venv/bin/python bench/faults.py kill9 -n 10 --rabbitmq-kill

The node (``leveret-crash@localhost``, AMQP on 127.0.0.1:5741) is started fresh by
``bench/rabbitmq_node.sh``, then killed -9 (its beam.smp) and restarted on the same data
directory at every iteration, and stopped at the end. Needs the rabbitmq-server package.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import os
import random
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import crash_test as ct

REPO = Path(__file__).resolve().parents[1]


def rabbitmq_pid(node: str) -> int:
    """The beam.smp PID of a RabbitMQ node (its command line does not name the node)."""
    out = subprocess.run(
        ["rabbitmqctl", "-n", node, "eval", "list_to_integer(os:getpid())."],
        capture_output=True,
        text=True,
        check=True,
    )
    return int(out.stdout.strip().splitlines()[-1])


class RabbitNode:
    """A private RabbitMQ node (``bench/rabbitmq_node.sh``'s layout, its own name and
    ports) that crash_test's iterations drive like its BrokerProcess: ``url``, ``start()``
    (seconds until AMQP accepts TCP), ``kill()`` (SIGKILL the beam), ``wait()``, ``stop()``.
    Restarts keep the data directory (rabbitmq_node.sh wipes it at each start)."""

    NODE, PORT, DIST_PORT = "leveret-crash@localhost", 5741, 25741

    def __init__(self) -> None:
        self.base = Path(os.environ.get("TMPDIR", "/tmp")) / "leveret-crash"
        self.url = f"amqp://guest:guest@127.0.0.1:{self.PORT}/"
        self.pid = 0

    def first_start(self) -> None:
        """A fresh node through rabbitmq_node.sh (config, plugins file, empty data dir)."""
        script = str(REPO / "bench" / "rabbitmq_node.sh")
        subprocess.run(
            [script, "start", self.NODE, str(self.PORT), str(self.DIST_PORT)],
            check=True,
            capture_output=True,
        )
        self.pid = rabbitmq_pid(self.NODE)

    def start(self) -> float:
        began = time.monotonic()
        env = {
            **os.environ,
            "RABBITMQ_NODENAME": self.NODE,
            "RABBITMQ_NODE_IP_ADDRESS": "127.0.0.1",
            "RABBITMQ_NODE_PORT": str(self.PORT),
            "RABBITMQ_DIST_PORT": str(self.DIST_PORT),
            "RABBITMQ_MNESIA_BASE": str(self.base / "mnesia"),
            "RABBITMQ_LOG_BASE": str(self.base / "log"),
            "RABBITMQ_ENABLED_PLUGINS_FILE": str(self.base / "enabled_plugins"),
            "RABBITMQ_CONFIG_FILE": str(self.base / "rabbitmq.conf"),
        }
        with open(self.base / "stdout.log", "ab") as log:
            subprocess.Popen(
                ["setsid", "rabbitmq-server"],
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.PORT), timeout=1).close()
                break
            except OSError:
                if time.monotonic() - began > 120:
                    raise RuntimeError("the RabbitMQ node did not come back") from None
                time.sleep(0.05)
        elapsed = time.monotonic() - began
        self.pid = rabbitmq_pid(self.NODE)
        return elapsed

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, 9)

    def wait(self) -> None:
        while Path(f"/proc/{self.pid}").exists():
            with contextlib.suppress(OSError):
                if "\nState:\tZ" in Path(f"/proc/{self.pid}/status").read_text():
                    return
            time.sleep(0.05)

    def stop(self) -> None:
        subprocess.run(["rabbitmqctl", "-n", self.NODE, "stop"], capture_output=True)


def rabbitmq_kill9(iterations: int) -> dict[str, Any]:
    """crash_test's publish and consume iterations, alternately, against a RabbitMQ node;
    its totals per scenario."""
    node = RabbitNode()
    node.first_start()
    rng = random.Random(iterations)
    results = []
    try:
        for i in range(iterations):
            kill_ms = rng.randint(50, 400)
            if i % 2 == 0:
                run = ct.publish_iteration(node, f"crash.publish.{i}", kill_ms)  # type: ignore[arg-type]
            else:
                run = ct.consume_iteration(node, f"crash.consume.{i}", kill_ms)  # type: ignore[arg-type]
            results.append(asyncio.run(run))
            brief = {k: v for k, v in dataclasses.asdict(results[-1]).items() if v or k == "lost"}
            print(json.dumps(brief), file=sys.stderr, flush=True)
    finally:
        node.stop()
    out: dict[str, Any] = {
        mode: ct.totals([r for r in results if r.mode == mode]) for mode in ("publish", "consume")
    }
    out["failures"] = [dataclasses.asdict(r) for r in results if r.failed()]
    return out
