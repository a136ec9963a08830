"""Leveret's pytest plugin against the other ways a Python suite gets a RabbitMQ to test on.

What it measures
----------------
For each of these, a generated pytest project of N (default 200) tests, all with the same
body where the tool allows it:

- ``bare``: N empty tests, no plugin (what pytest itself costs; the floor for the others);
- ``leveret``: Leveret's plugin, the ``pika_connection`` fixture (a ``pika.BlockingConnection``
  to ``amqp_url``, a fresh vhost per test): declare a queue, publish, ``basic_get`` it back;
- ``pytest-rabbitmq``: pytest-rabbitmq's ``rabbitmq`` fixture (a ``pika.BlockingConnection``
  to the ``rabbitmq_proc`` rabbitmq-server it starts once per session; after each test it
  lists exchanges and queues with ``rabbitmqctl`` and deletes them): the same body;
- ``pytest-rabbitmq-ownteardown``: the same, with a client fixture made by
  ``factories.rabbitmq("rabbitmq_proc", teardown=...)`` whose teardown deletes the test's
  queue over AMQP instead of calling rabbitmqctl (what its docstring suggests for speed);
- ``faststream``: FastStream's ``TestRabbitBroker`` (in memory, no connection): per test
  ``async with TestRabbitBroker(broker)``, publish to the subscriber's queue, assert on the
  handler's mock (pytest-asyncio, strict mode).

Each project runs as ``python -m pytest`` in a subprocess with plugin autoloading off and
only its own plugins given with ``-p`` (so no variant pays for another's imports). A
conftest records wall-clock timestamps (``time.time()``, comparable with the driver's launch
time) and each test's ``pytest_runtest_protocol`` time (setup + call + teardown + pytest's
reporting of them). Figures per run:

- ``start``: from launching the subprocess to the start of the first test's call phase: the
  interpreter, pytest and plugin imports, collection, the session fixtures (starting the
  broker) and the first test's own fixtures; ``pytest_up`` is the part until
  ``pytest_sessionstart``, ``first_setup`` the first test's setup phase (the session
  broker's start-up is in it);
- ``per_test``: the median of the N per-test protocol times (nothing subtracted: the first
  test includes the session broker's start and the last its stop; the median is not moved
  by them); p95 too;
- ``wall``: launch to exit of the whole pytest process.

Every variant is run ``--reps`` times (default 3), interleaved (bare, leveret,
pytest-rabbitmq, ... then again), and the medians of the runs are reported.

``--capabilities`` also runs small test projects that check what each tool can do (a real
AMQP wire, topic wildcards compared case by case, TTL and dead-lettering with ``x-death``,
a virtual clock, a journal of traffic, injected faults: a dropped connection, a restart, a
memory alarm) and prints each test's outcome; a failed check is a capability the tool lacks,
with pytest's one-line reason. It also times a rabbitmq-server restart and a rabbitmqctl call.

testcontainers cannot be measured here: it needs a Docker engine, and this machine has none.

Needs: rabbitmq-server (Debian: ``apt-get install rabbitmq-server``; the binaries in
/usr/lib/rabbitmq/bin) and a Python environment with pytest, pytest-rabbitmq, pika,
aio-pika, faststream[rabbit], pytest-asyncio and Leveret (``pip install /path/to/leveret``)::

    python3 -m venv /tmp/doubles-venv
    /tmp/doubles-venv/bin/pip install pytest pytest-rabbitmq pika aio-pika \\
        "faststream[rabbit]" pytest-asyncio "testcontainers[rabbitmq]" /path/to/leveret
    /tmp/doubles-venv/bin/python bench/test_doubles.py --capabilities

Options: ``--n`` tests per session, ``--reps``, ``--only a,b`` variants, ``--python`` the
interpreter of that environment (default: this one), ``--json FILE`` the raw runs.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
import xml.etree.ElementTree as ET
from pathlib import Path

RABBIT_BIN = "/usr/lib/rabbitmq/bin"

TIMING_CONFTEST = """
import json, os, time
import pytest

_T0 = float(os.environ["DOUBLES_T0"])
_OUT = os.environ["DOUBLES_OUT"]
_data = {"pytest_up": None, "first_call_start": None, "tests": [], "first_setup": None,
         "last_teardown": None}


def pytest_sessionstart(session):
    _data["pytest_up"] = time.time() - _T0


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
    if _data["first_call_start"] is None:
        _data["first_call_start"] = time.time() - _T0
    yield


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    start = time.perf_counter()
    yield
    _data["tests"].append(time.perf_counter() - start)


def pytest_runtest_logreport(report):
    if report.when == "setup" and _data["first_setup"] is None:
        _data["first_setup"] = report.duration
    if report.when == "teardown":
        _data["last_teardown"] = report.duration
    if report.failed:
        _data.setdefault("failures", []).append(report.nodeid)


def pytest_sessionfinish(session, exitstatus):
    _data["exitstatus"] = int(exitstatus)
    with open(_OUT, "w") as f:
        json.dump(_data, f)
"""

PIKA_BODY = """
    channel = {conn}.channel()
    channel.queue_declare("jobs")
    channel.basic_publish("", "jobs", b"hello %d" % i)
    for _ in range(1000):
        method, properties, body = channel.basic_get("jobs", auto_ack=True)
        if method is not None:
            break
    assert body == b"hello %d" % i
"""


def pika_round_trip(fixture: str, preamble: str = "") -> dict[str, str]:
    """The timed test file of a variant whose ``fixture`` is a pika connection: the same
    declare, publish and get for Leveret and pytest-rabbitmq alike."""
    head = f"""
import pytest
{preamble}

@pytest.mark.parametrize("i", range({{n}}))
def test_round_trip(i, {fixture}):
"""
    return {"test_timing.py": head + PIKA_BODY.replace("{conn}", fixture)}


# pytest-rabbitmq's own teardown runs rabbitmqctl (an Erlang VM) twice per test; this one
# deletes the test's queue over AMQP instead.
OWN_TEARDOWN = """from pytest_rabbitmq import factories


def _delete_jobs(process, connection):
    connection.channel().queue_delete("jobs")


rabbitmq_fast = factories.rabbitmq("rabbitmq_proc", teardown=_delete_jobs)
"""

TIMING_PROJECTS = {
    "bare": {
        "plugins": [],
        "files": {
            "test_timing.py": """
import pytest

@pytest.mark.parametrize("i", range({n}))
def test_round_trip(i):
    pass
"""
        },
    },
    "leveret": {"plugins": ["leveret.testing"], "files": pika_round_trip("pika_connection")},
    "pytest-rabbitmq": {
        "plugins": ["pytest_rabbitmq.plugin"],
        "rabbit_args": True,
        "files": pika_round_trip("rabbitmq"),
    },
    "pytest-rabbitmq-ownteardown": {
        "plugins": ["pytest_rabbitmq.plugin"],
        "rabbit_args": True,
        "files": pika_round_trip("rabbitmq_fast", OWN_TEARDOWN),
    },
    "faststream": {
        "plugins": ["pytest_asyncio.plugin"],
        "files": {
            "test_timing.py": """
import pytest
from faststream.rabbit import RabbitBroker, TestRabbitBroker

broker = RabbitBroker("amqp://guest:guest@127.0.0.1:1/")  # never connected to


@broker.subscriber("jobs")
async def handle(body: bytes) -> None:
    pass


@pytest.mark.asyncio
@pytest.mark.parametrize("i", range({n}))
async def test_round_trip(i):
    async with TestRabbitBroker(broker) as br:
        await br.publish(b"hello %d" % i, queue="jobs")
        handle.mock.assert_called_once_with(b"hello %d" % i)
"""
        },
    },
}

INI = """[pytest]
asyncio_default_fixture_loop_scope = function
"""


def rabbit_args() -> list[str]:
    return [
        "--rabbitmq-server",
        f"{RABBIT_BIN}/rabbitmq-server",
        "--rabbitmq-ctl",
        f"{RABBIT_BIN}/rabbitmqctl",
    ]


def write_project(root: Path, files: dict[str, str], n: int, asyncio: bool = False) -> None:
    root.mkdir(parents=True, exist_ok=True)
    (root / "pytest.ini").write_text(INI if asyncio else "[pytest]\n")
    files = {"conftest.py": "", **files}
    for name, text in files.items():
        if name == "conftest.py":  # a project's own conftest comes after the timing one
            text = TIMING_CONFTEST + text
        (root / name).write_text(text.replace("{n}", str(n)))


def pytest_command(python: str, plugins: list[str], extra: list[str]) -> list[str]:
    cmd = [python, "-m", "pytest", "-q", "-p", "no:cacheprovider"]
    for plugin in plugins:
        cmd += ["-p", plugin]
    return cmd + extra


def run_timing(python: str, root: Path, variant: str, n: int, rep: int) -> dict:
    spec = TIMING_PROJECTS[variant]
    out = root / f"timing-{variant}-{rep}.json"
    cmd = pytest_command(python, spec["plugins"], rabbit_args() if spec.get("rabbit_args") else [])
    env = dict(os.environ, PYTEST_DISABLE_PLUGIN_AUTOLOAD="1", DOUBLES_OUT=str(out))
    env["DOUBLES_T0"] = repr(time.time())
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=root / variant, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    result: dict = {"variant": variant, "rep": rep, "wall": wall, "returncode": proc.returncode}
    if out.exists():
        data = json.loads(out.read_text())
        tests = data["tests"]
        result.update(
            pytest_up=data["pytest_up"],
            start=data["first_call_start"],
            first_setup=data["first_setup"],
            last_teardown=data["last_teardown"],
            tests=len(tests),
            per_test=statistics.median(tests) if tests else None,
            per_test_p95=sorted(tests)[int(0.95 * (len(tests) - 1))] if tests else None,
            per_test_mean=statistics.fmean(tests) if tests else None,
            failures=len(data.get("failures", [])),
        )
    if proc.returncode != 0:
        result["output_tail"] = (proc.stdout + proc.stderr)[-2000:]
    return result


# -- capabilities --------------------------------------------------------------------------

# (binding key, routing key, does AMQP 0-9-1 / RabbitMQ route it?)
TOPIC_CASES = [
    ("*.error", "db.error", True),
    ("*.error", "db.disk.error", False),
    ("*.error", "error", False),
    ("#.error", "error", True),
    ("#.error", "db.disk.error", True),
    ("logs.#", "logs", True),
    ("logs.#", "logs.a.b", True),
    ("a.*.c", "a.b.c", True),
    ("a.#.c", "a.c", True),
    ("a.#.c", "a.b.b.c", True),
    ("#.a.#", "a", True),
    ("a.*", "a", False),
    ("#", "anything.at.all", True),
    ("a.#.#.b", "a.b", True),
    ("*.*", "a.b.c", False),
]

PIKA_CAPS = """
import time
import pika
import pytest

TOPIC_CASES = {cases!r}


def _topic_routes(channel, n, binding, key):
    exchange = "topic-%d" % n
    channel.exchange_declare(exchange, "topic")
    queue = "q-%d" % n
    channel.queue_declare(queue)
    channel.queue_bind(queue, exchange, binding)
    channel.basic_publish(exchange, key, b"m")
    channel.queue_declare(queue, passive=True)  # a round trip after the publish
    method = None
    for _ in range(50):
        method, _p, _b = channel.basic_get(queue, auto_ack=True)
        if method is not None:
            break
        time.sleep(0.002)
    channel.queue_delete(queue)
    channel.exchange_delete(exchange)
    return method is not None


@pytest.mark.parametrize("n", range(len(TOPIC_CASES)))
def test_topic_case(n, {conn}):
    binding, key, expected = TOPIC_CASES[n]
    assert _topic_routes({conn}.channel(), n, binding, key) is expected, (binding, key)


def _wait_get(channel, queue, timeout=3.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        method, props, body = channel.basic_get(queue, auto_ack=True)
        if method is not None:
            return props, body
        time.sleep(0.01)
    raise AssertionError("nothing in %s after %ss" % (queue, timeout))


def test_ttl_dead_letters_with_x_death({conn}):
    channel = {conn}.channel()
    channel.queue_declare("dead")
    channel.queue_declare("work", arguments={"x-message-ttl": 50, "x-dead-letter-exchange": "",
                                             "x-dead-letter-routing-key": "dead"})
    channel.basic_publish("", "work", b"late")
    props, body = _wait_get(channel, "dead")
    (death,) = props.headers["x-death"]
    assert (body, death["queue"], death["reason"]) == (b"late", "work", "expired")


def test_reject_dead_letters_with_x_death({conn}):
    channel = {conn}.channel()
    channel.queue_declare("dead2")
    channel.queue_declare("work2", arguments={"x-dead-letter-exchange": "",
                                              "x-dead-letter-routing-key": "dead2"})
    channel.basic_publish("", "work2", b"bad")
    channel.queue_declare("work2", passive=True, arguments=None)
    method = None
    for _ in range(100):
        method, _p, _b = channel.basic_get("work2")
        if method is not None:
            break
        time.sleep(0.01)
    channel.basic_reject(method.delivery_tag, requeue=False)
    props, body = _wait_get(channel, "dead2")
    assert props.headers["x-death"][0]["reason"] == "rejected"
"""

LEVERET_CAPS = '''
import time
import pika
import pytest


def test_real_wire(amqp_url):
    connection = pika.BlockingConnection(pika.URLParameters(amqp_url))
    assert connection.is_open
    connection.close()


def test_virtual_clock_ttl_minute(pika_connection, leveret):
    channel = pika_connection.channel()
    channel.queue_declare("orders")
    channel.queue_declare("retry", arguments={"x-message-ttl": 60_000,
                                              "x-dead-letter-exchange": "",
                                              "x-dead-letter-routing-key": "orders"})
    leveret.clock.freeze()
    channel.basic_publish("", "retry", b"order 42")
    leveret.wait_for_messages("retry", 1)
    started = time.monotonic()
    leveret.clock.advance(59)
    assert leveret.messages_ready("orders") == 0
    leveret.clock.advance(2)
    method, props, body = channel.basic_get("orders", auto_ack=True)
    assert body == b"order 42" and props.headers["x-death"][0]["reason"] == "expired"
    assert time.monotonic() - started < 1.0


def test_journal(pika_connection, leveret):
    """What was published, where it went, what was dead-lettered: leveret.journal."""
    journal = leveret.journal
    channel = pika_connection.channel()
    channel.queue_declare("dead")
    channel.queue_declare("work", arguments={"x-dead-letter-exchange": "",
                                             "x-dead-letter-routing-key": "dead"})
    channel.basic_publish("", "work", b"job")
    channel.basic_publish("", "nowhere", b"lost")
    method, _p, _b = channel.basic_get("work")
    channel.basic_reject(method.delivery_tag, requeue=False)
    [dead] = journal.wait_for("dead_lettered", reason="rejected")
    assert (dead.queue, dead.queues) == ("work", ("dead",))
    assert [r.body for r in journal.routed_to("work")] == [b"job"]
    assert [r.body for r in journal.unroutable()] == [b"lost"]


def test_faults_drop_close_alarm(amqp_url, leveret):
    """Injected faults from the inspector: a network failure, a forced close, an alarm."""
    connection = pika.BlockingConnection(pika.URLParameters(amqp_url))
    assert leveret.faults.drop_connections() == 1
    with pytest.raises(pika.exceptions.AMQPConnectionError):
        for _ in range(100):
            connection.process_data_events(time_limit=0.01)
            connection.channel()
    connection = pika.BlockingConnection(pika.URLParameters(amqp_url))
    assert leveret.faults.close_connections(reason="maintenance") == 1
    with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as closed:
        connection.channel()
    assert closed.value.reply_code == 320
    blocked = []
    connection = pika.BlockingConnection(pika.URLParameters(amqp_url))
    connection.add_on_connection_blocked_callback(lambda *a: blocked.append(1))
    leveret.faults.memory_alarm()
    try:
        connection.channel().basic_publish("", "q", b"x")
        for _ in range(100):
            connection.process_data_events(time_limit=0.01)
            if blocked:
                break
        assert blocked
    finally:
        leveret.faults.memory_alarm(on=False)
        connection.close()


def test_faults_restart_keeps_durable_message(amqp_url, leveret):
    """leveret.faults.restart(): kill -9 and start again on the same port and data dir."""
    connection = pika.BlockingConnection(pika.URLParameters(amqp_url))
    channel = connection.channel()
    channel.confirm_delivery()
    channel.queue_declare("durable", durable=True)
    channel.basic_publish("", "durable", b"kept", pika.BasicProperties(delivery_mode=2))
    started = time.perf_counter()
    leveret.faults.restart()
    restarted = time.perf_counter() - started
    connection = pika.BlockingConnection(pika.URLParameters(amqp_url))
    method, _p, body = connection.channel().basic_get("durable", auto_ack=True)
    connection.close()
    with open("leveret-restart.txt", "w") as f:
        f.write("%.4f" % restarted)
    assert body == b"kept"
'''

LEVERET_CONFTEST = """
import pytest
from leveret.config import Config


@pytest.fixture(scope="session")
def leveret_config(tmp_path_factory):
    return Config(host="127.0.0.1", port=0, data_dir=tmp_path_factory.mktemp("leveret"))
"""

RABBIT_CAPS = '''
import time
import pika
import pytest


def test_real_wire(rabbitmq):
    assert rabbitmq.is_open


def test_virtual_clock(rabbitmq_proc):
    """No clock API: a 60 s TTL takes 60 s of real time."""
    assert hasattr(rabbitmq_proc, "clock")


def test_journal(rabbitmq_proc):
    assert hasattr(rabbitmq_proc, "journal")


def test_firehose_trace_with_rabbitmqctl(rabbitmq, rabbitmq_proc):
    """RabbitMQ's firehose: rabbitmqctl trace_on, a queue bound to amq.rabbitmq.trace."""
    rabbitmq_proc.rabbitctl_output("trace_on")
    try:
        channel = rabbitmq.channel()
        channel.queue_declare("trace")
        channel.queue_bind("trace", "amq.rabbitmq.trace", "publish.#")
        channel.queue_declare("jobs")
        channel.basic_publish("", "jobs", b"hello")
        channel.queue_declare("jobs", passive=True)
        for _ in range(100):
            method, props, body = channel.basic_get("trace", auto_ack=True)
            if method is not None:
                break
            time.sleep(0.01)
        assert body == b"hello" and list(props.headers["routed_queues"]) == ["jobs"]
    finally:
        rabbitmq_proc.rabbitctl_output("trace_off")


def test_connection_drop_with_rabbitmqctl(rabbitmq_proc):
    params = pika.ConnectionParameters(host=rabbitmq_proc.host, port=rabbitmq_proc.port,
                                       client_properties={"connection_name": "victim"})
    connection = pika.BlockingConnection(params)
    pids = [line.split()[0] for line in
            rabbitmq_proc.rabbitctl_output("list_connections", "pid", "client_properties",
                                           "-q").splitlines() if "victim" in line]
    assert pids
    started = time.perf_counter()
    rabbitmq_proc.rabbitctl_output("close_connection", pids[0], "test fault")
    with open("rabbitmqctl-close.txt", "w") as f:
        f.write("%.4f" % (time.perf_counter() - started))
    with pytest.raises(pika.exceptions.ConnectionClosedByBroker):
        for _ in range(200):
            connection.process_data_events(time_limit=0.01)


def test_memory_alarm_with_rabbitmqctl(rabbitmq_proc):
    params = pika.ConnectionParameters(host=rabbitmq_proc.host, port=rabbitmq_proc.port)
    connection = pika.BlockingConnection(params)
    blocked = []
    connection.add_on_connection_blocked_callback(lambda *a: blocked.append(a))
    channel = connection.channel()
    rabbitmq_proc.rabbitctl_output("set_vm_memory_high_watermark", "0")
    try:
        channel.basic_publish("", "nowhere", b"x")
        for _ in range(300):
            connection.process_data_events(time_limit=0.01)
            if blocked:
                break
        assert blocked
    finally:
        rabbitmq_proc.rabbitctl_output("set_vm_memory_high_watermark", "0.4")
        connection.close()


def test_restart_rabbitmq_server(rabbitmq_proc):
    started = time.perf_counter()
    rabbitmq_proc.stop()
    stopped = time.perf_counter()
    rabbitmq_proc.start()
    done = time.perf_counter()
    with open("rabbitmq-restart.txt", "w") as f:
        f.write("%.3f %.3f" % (stopped - started, done - stopped))
    params = pika.ConnectionParameters(host=rabbitmq_proc.host, port=rabbitmq_proc.port)
    assert pika.BlockingConnection(params).is_open
'''

FASTSTREAM_CAPS = '''
import asyncio
import pytest
from faststream.exceptions import SubscriberNotFound
from faststream.rabbit import (ExchangeType, RabbitBroker, RabbitExchange, RabbitMessage,
                               RabbitQueue, TestRabbitBroker)

TOPIC_CASES = {cases!r}


@pytest.mark.asyncio
async def test_no_wire():
    """Inside TestRabbitBroker nothing connects: a broker URL where nothing listens works."""
    broker = RabbitBroker("amqp://guest:guest@127.0.0.1:1/")
    seen = []

    @broker.subscriber("q")
    async def handle(body: bytes) -> None:
        seen.append(body)

    async with TestRabbitBroker(broker) as br:
        await br.publish(b"x", queue="q")
    assert seen == [b"x"]


@pytest.mark.asyncio
async def test_real_wire():
    """A real client (aio-pika) can connect to what TestRabbitBroker runs: nothing listens."""
    import aio_pika
    broker = RabbitBroker("amqp://guest:guest@127.0.0.1:1/")
    async with TestRabbitBroker(broker):
        connection = await aio_pika.connect("amqp://guest:guest@127.0.0.1:1/", timeout=2)
        await connection.close()


@pytest.mark.asyncio
@pytest.mark.parametrize("n", range(len(TOPIC_CASES)))
async def test_topic_case(n):
    binding, key, expected = TOPIC_CASES[n]
    broker = RabbitBroker("amqp://guest:guest@127.0.0.1:1/")
    exchange = RabbitExchange("logs", type=ExchangeType.TOPIC)
    seen = []

    @broker.subscriber(RabbitQueue("q", routing_key=binding), exchange)
    async def handle(body: bytes) -> None:
        seen.append(body)

    async with TestRabbitBroker(broker) as br:
        try:
            await br.publish(b"m", exchange=exchange, routing_key=key)
        except SubscriberNotFound:
            pass
    assert bool(seen) is expected, (binding, key)


@pytest.mark.asyncio
async def test_ttl_dead_letters_with_x_death():
    broker = RabbitBroker("amqp://guest:guest@127.0.0.1:1/")
    dead = []
    work = RabbitQueue("work", arguments={"x-message-ttl": 50, "x-dead-letter-exchange": "",
                                          "x-dead-letter-routing-key": "dead"})
    publisher = broker.publisher(work)

    @broker.subscriber("dead")
    async def on_dead(body: bytes, message: RabbitMessage) -> None:
        dead.append(message.headers)

    async with TestRabbitBroker(broker):
        try:
            await publisher.publish(b"late")
        except SubscriberNotFound as exc:
            raise AssertionError("publish to a queue without a subscriber: %r" % exc)
        await asyncio.sleep(0.3)
    assert dead and dead[0]["x-death"][0]["reason"] == "expired"


@pytest.mark.asyncio
async def test_reject_dead_letters_with_x_death():
    broker = RabbitBroker("amqp://guest:guest@127.0.0.1:1/")
    dead = []
    work = RabbitQueue("work2", arguments={"x-dead-letter-exchange": "",
                                           "x-dead-letter-routing-key": "dead2"})

    @broker.subscriber(work)
    async def on_work(body: bytes, message: RabbitMessage) -> None:
        await message.reject()

    @broker.subscriber("dead2")
    async def on_dead(body: bytes, message: RabbitMessage) -> None:
        dead.append(message.headers)

    async with TestRabbitBroker(broker) as br:
        await br.publish(b"bad", queue=work)
        await asyncio.sleep(0.3)
    assert dead and dead[0]["x-death"][0]["reason"] == "rejected"


@pytest.mark.asyncio
async def test_unroutable_publish_is_dropped_silently():
    """RabbitMQ drops an unroutable publish (no mandatory flag) without an error."""
    broker = RabbitBroker("amqp://guest:guest@127.0.0.1:1/")

    @broker.subscriber("q")
    async def handle(body: bytes) -> None:
        pass

    async with TestRabbitBroker(broker) as br:
        await br.publish(b"x", queue="nobody-listens")


@pytest.mark.asyncio
async def test_competing_consumers_get_one_copy():
    """Two consumers of one queue: RabbitMQ gives each message to one of them."""
    broker = RabbitBroker("amqp://guest:guest@127.0.0.1:1/")
    seen = []

    @broker.subscriber("shared")
    async def first(body: bytes) -> None:
        seen.append("first")

    @broker.subscriber("shared")
    async def second(body: bytes) -> None:
        seen.append("second")

    async with TestRabbitBroker(broker) as br:
        await br.publish(b"x", queue="shared")
    assert len(seen) == 1, seen


@pytest.mark.asyncio
async def test_publish_record_mocks():
    """What FastStream records: each subscriber's and publisher's .mock (a journal of sorts)."""
    broker = RabbitBroker("amqp://guest:guest@127.0.0.1:1/")
    out = broker.publisher("out")

    @broker.subscriber("in")
    async def handle(body: bytes) -> None:
        await out.publish(body + b"!")

    async with TestRabbitBroker(broker) as br:
        await br.publish(b"x", queue="in")
        handle.mock.assert_called_once_with(b"x")
        out.mock.assert_called_once_with(b"x!")


@pytest.mark.asyncio
async def test_virtual_clock():
    """No clock: TestRabbitBroker has no TTL to advance."""
    assert hasattr(TestRabbitBroker, "clock")


@pytest.mark.asyncio
async def test_faults():
    """No connection to drop, no server to restart, no alarm."""
    assert hasattr(TestRabbitBroker, "faults")
'''


def caps_text(template: str, conn: str = "") -> str:
    return template.replace("{cases!r}", repr(TOPIC_CASES)).replace("{conn}", conn)


TESTCONTAINERS_CAPS = """
def test_testcontainers_rabbitmq_starts():
    from testcontainers.rabbitmq import RabbitMqContainer

    with RabbitMqContainer("rabbitmq:3.10") as rabbit:
        assert rabbit.get_connection_params()
"""

CAP_PROJECTS = {
    "leveret": {
        "plugins": ["leveret.testing"],
        "files": {
            "test_caps_pika.py": caps_text(PIKA_CAPS, conn="pika_connection"),
            "test_caps_own.py": LEVERET_CAPS,
            # restart() needs a data directory, as docs/testing.md's conftest gives it.
            "conftest.py": LEVERET_CONFTEST,
        },
    },
    "pytest-rabbitmq": {
        "plugins": ["pytest_rabbitmq.plugin"],
        "rabbit_args": True,
        "files": {
            "test_caps_pika.py": caps_text(PIKA_CAPS, conn="rabbitmq"),
            # Last: it restarts the session's server.
            "test_caps_zown.py": RABBIT_CAPS,
        },
    },
    "faststream": {
        "plugins": ["pytest_asyncio.plugin"],
        "files": {"test_caps.py": caps_text(FASTSTREAM_CAPS)},
    },
    "testcontainers": {
        "plugins": [],
        "files": {"test_caps.py": TESTCONTAINERS_CAPS},
    },
}


def run_capabilities(python: str, root: Path, only: list[str]) -> dict:
    results: dict = {}
    for variant, spec in CAP_PROJECTS.items():
        if only and variant not in only:
            continue
        project = root / f"caps-{variant}"
        write_project(project, spec["files"], 0, asyncio="pytest_asyncio.plugin" in spec["plugins"])
        xml = project / "junit.xml"
        cmd = pytest_command(
            python,
            spec["plugins"],
            (rabbit_args() if spec.get("rabbit_args") else []) + [f"--junitxml={xml}", "-rA"],
        )
        env = dict(
            os.environ,
            PYTEST_DISABLE_PLUGIN_AUTOLOAD="1",
            DOUBLES_OUT=str(project / "timing.json"),
            DOUBLES_T0=repr(time.time()),
        )
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, cwd=project, env=env, capture_output=True, text=True)
        outcomes = {}
        if xml.exists():
            for case in ET.parse(xml).getroot().iter("testcase"):
                name = case.get("name")
                failure = case.find("failure")
                if failure is None:
                    failure = case.find("error")
                skipped = case.find("skipped")
                if failure is not None:
                    outcomes[name] = "FAIL: " + first_line(failure.get("message", ""))
                elif skipped is not None:
                    outcomes[name] = "SKIP: " + first_line(skipped.get("message", ""))
                else:
                    outcomes[name] = "pass"
        extras = {}
        for name in ("leveret-restart.txt", "rabbitmq-restart.txt", "rabbitmqctl-close.txt"):
            if (project / name).exists():
                extras[name] = (project / name).read_text()
        results[variant] = {
            "outcomes": outcomes,
            "extras": extras,
            "wall": time.perf_counter() - t0,
            "returncode": proc.returncode,
        }
        if not outcomes:
            results[variant]["output_tail"] = (proc.stdout + proc.stderr)[-3000:]
    return results


def first_line(text: str) -> str:
    text = re.sub(r"\s+", " ", text).strip()
    return text[:160]


def versions(python: str) -> dict:
    code = textwrap.dedent(
        """
        import importlib.metadata as m, json, platform
        out = {"python": platform.python_version()}
        for d in ["pytest", "pytest-rabbitmq", "pika", "aio-pika", "faststream",
                  "pytest-asyncio", "leveret"]:
            try:
                out[d] = m.version(d)
            except m.PackageNotFoundError:
                out[d] = None
        print(json.dumps(out))
        """
    )
    out = json.loads(
        subprocess.run([python, "-c", code], capture_output=True, text=True, check=True).stdout
    )
    dpkg = subprocess.run(
        ["dpkg-query", "-W", "-f", "${Version}", "rabbitmq-server"], capture_output=True, text=True
    )
    out["rabbitmq-server (deb)"] = dpkg.stdout.strip() or None
    erl = subprocess.run(
        ["dpkg-query", "-W", "-f", "${Version}", "erlang-base"], capture_output=True, text=True
    )
    out["erlang-base (deb)"] = erl.stdout.strip() or None
    out["docker"] = shutil.which("docker")
    return out


def med(runs: list[dict], key: str) -> float | None:
    values = [r[key] for r in runs if r.get(key) is not None]
    return statistics.median(values) if values else None


def fmt(seconds: float | None, unit: str = "auto") -> str:
    if seconds is None:
        return "failed"
    if unit == "ms" or (unit == "auto" and seconds < 1):
        return f"{seconds * 1000:.1f} ms"
    return f"{seconds:.2f} s"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=200, help="tests per session (200)")
    parser.add_argument("--reps", type=int, default=3, help="runs of each variant (3)")
    parser.add_argument("--only", default="", help="comma-separated variants")
    parser.add_argument("--python", default=sys.executable)
    parser.add_argument("--capabilities", action="store_true", help="run the capability checks")
    parser.add_argument("--no-timing", action="store_true", help="skip the timing runs")
    parser.add_argument("--json", default="", help="write the raw results here")
    parser.add_argument("--keep", action="store_true", help="keep the generated projects")
    args = parser.parse_args()

    variants = [v for v in TIMING_PROJECTS if not args.only or v in args.only.split(",")]
    root = Path(tempfile.mkdtemp(prefix="test-doubles-"))
    report: dict = {
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "versions": versions(args.python),
        "n": args.n,
        "reps": args.reps,
        "loadavg_start": os.getloadavg(),
        "runs": [],
    }
    print(json.dumps(report["versions"]), flush=True)
    try:
        if not args.no_timing:
            for variant in variants:
                spec = TIMING_PROJECTS[variant]
                write_project(
                    root / variant,
                    spec["files"],
                    args.n,
                    asyncio="pytest_asyncio.plugin" in spec["plugins"],
                )
            for rep in range(args.reps):
                for variant in variants:
                    result = run_timing(args.python, root, variant, args.n, rep)
                    report["runs"].append(result)
                    print(
                        json.dumps({k: v for k, v in result.items() if k != "output_tail"}),
                        flush=True,
                    )
                    if "output_tail" in result:
                        print(result["output_tail"], file=sys.stderr)
            report["loadavg_end"] = os.getloadavg()
            print()
            print(
                f"| variant | start (launch to 1st test) | pytest up | 1st setup | per test "
                f"(median / p95) | {args.n} tests wall | failed runs |"
            )
            print("|---|---:|---:|---:|---:|---:|---:|")
            for variant in variants:
                runs = [r for r in report["runs"] if r["variant"] == variant]
                bad = sum(1 for r in runs if r["returncode"] != 0 or r.get("tests") != args.n)
                print(
                    f"| {variant} | {fmt(med(runs, 'start'))} | {fmt(med(runs, 'pytest_up'))} "
                    f"| {fmt(med(runs, 'first_setup'))} | {fmt(med(runs, 'per_test'), 'ms')} / "
                    f"{fmt(med(runs, 'per_test_p95'), 'ms')} | {fmt(med(runs, 'wall'))} | "
                    f"{bad}/{len(runs)} |"
                )
        if args.capabilities:
            caps = run_capabilities(args.python, root, [v for v in args.only.split(",") if v])
            report["capabilities"] = caps
            for variant, result in caps.items():
                print(f"\n## {variant} (exit {result['returncode']}, {result['wall']:.1f} s)")
                topic = {k: v for k, v in result["outcomes"].items() if k.startswith("test_topic")}
                if topic:
                    wrong = [
                        TOPIC_CASES[int(re.search(r"\[(\d+)\]", k).group(1))][:2]
                        for k, v in topic.items()
                        if v != "pass"
                    ]
                    print(
                        f"- topic wildcard cases routed as AMQP 0-9-1 / RabbitMQ route them: "
                        f"{len(topic) - len(wrong)}/{len(topic)}; not: {wrong}"
                    )
                for name, outcome in result["outcomes"].items():
                    if not name.startswith("test_topic"):
                        print(f"- {name}: {outcome}")
                for name, text in result["extras"].items():
                    print(f"- {name}: {text}")
                if "output_tail" in result:
                    print(result["output_tail"])
        if args.json:
            Path(args.json).write_text(json.dumps(report, indent=1))
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
        else:
            print(f"projects kept in {root}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
