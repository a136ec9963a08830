"""Who may use the control channel: the socket is 0600 and the node serves only its own
uid and root, so another local user is refused (by the kernel, and by the node when the
file's mode is loosened); a killed node's socket does not stop a restart, and a second
node on the same data directory is refused before it touches it."""

from __future__ import annotations

import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Iterator
from pathlib import Path

import pytest

from leveret import cli as leveret_cli
from tests.control.conftest import ENV, Node, leveret, start_node, stop_node

NOBODY = 65534


def run_as(uid: int, argv: list[str]) -> tuple[int, str]:
    """``leveret_cli.main(argv)`` (what the ``leveret`` script runs) in a child process
    that has become ``uid``: its exit status and what it printed."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: no return from here
        status = 99
        try:
            os.close(read)
            os.dup2(write, 1)
            os.dup2(write, 2)
            sys.stdout = os.fdopen(1, "w", closefd=False)
            sys.stderr = os.fdopen(2, "w", closefd=False)
            os.setgroups([])
            os.setgid(uid)
            os.setuid(uid)
            status = leveret_cli.main(argv)
            sys.stdout.flush()
            sys.stderr.flush()
        except BaseException:
            traceback.print_exc()  # shown in the test's failure
            sys.stderr.flush()
        finally:
            os._exit(status)
    os.close(write)
    with os.fdopen(read) as pipe:
        output = pipe.read()
    _, wait_status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(wait_status), output


@pytest.fixture
def shared_node() -> Iterator[Node]:
    """A node whose data directory other users may reach (a world-traversable parent),
    so what stops them is the socket itself."""
    assert os.geteuid() == 0, "these tests switch to another user: run them as root"
    parent = Path(tempfile.mkdtemp(prefix="leveret-ctl-"))
    parent.chmod(0o755)
    node = start_node(parent / "data")
    try:
        yield node
    finally:
        stop_node(node)
        shutil.rmtree(parent)


def test_socket_is_private_and_other_users_are_refused(shared_node: Node) -> None:
    path = shared_node.data_dir / "control.sock"
    info = path.lstat()
    assert stat.S_ISSOCK(info.st_mode)
    assert stat.S_IMODE(info.st_mode) == 0o600
    assert info.st_uid == os.geteuid()
    assert stat.S_IMODE(shared_node.data_dir.stat().st_mode) & 0o005  # others may traverse
    argv = ["diagnostics", "ping", "--control-socket", str(path)]
    # The kernel refuses another user's connect on a 0600 socket.
    status, output = run_as(NOBODY, argv)
    assert status == 69
    assert output.startswith(
        f"leveret: error: unable to connect to node leveret@localhost: control socket {path}: "
        "Permission denied"
    )
    # Loosen the file's mode: the node itself refuses a peer of another uid.
    path.chmod(0o666)
    status, output = run_as(NOBODY, argv)
    assert status == 77
    assert output.splitlines()[-1] == f"leveret: error: uid {NOBODY} may not control this node"
    # The node's own user is served.
    status, output = run_as(os.geteuid(), [*argv, "-q"])
    assert (status, output) == (0, "Ping succeeded\n")


def test_killed_node_leaves_no_obstacle_and_a_second_node_is_refused(tmp_path: Path) -> None:
    data = tmp_path / "data"
    first = start_node(data)
    try:
        second = leveret("serve", "--port", "0", "--management-port", "-1", "--data-dir", str(data))
        assert second.returncode == 1
        assert second.stderr.splitlines()[-1] == (
            f"leveret: error: control socket {data / 'control.sock'} is in use by another "
            "running node"
        )
        assert first.diagnostics("-q", "ping").stdout == "Ping succeeded\n"
    finally:
        first.proc.send_signal(signal.SIGKILL)
        first.proc.wait(10)
    assert (data / "control.sock").exists()  # nobody removed it
    again = start_node(data)
    try:
        assert again.diagnostics("-q", "ping").returncode == 0
    finally:
        stop_node(again)
    assert not (data / "control.sock").exists()  # a clean stop removes it
    down = again.diagnostics("ping")
    assert down.returncode == 69


def test_without_a_data_dir_the_socket_is_named_after_the_port_bound(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two nodes on port 0 without a data dir: each socket is named after the port its
    AMQP listener got, in a private runtime directory; ``--port`` finds it."""
    runtime = tmp_path / "run"
    env = {**ENV, "XDG_RUNTIME_DIR": str(runtime)}
    monkeypatch.setattr("tests.control.conftest.ENV", env)
    command = [sys.executable, "-m", "leveret", "serve", "--port", "0", "--management-port", "-1"]
    procs = [
        subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for _ in range(2)
    ]
    directory = runtime / "leveret"
    try:
        deadline = time.monotonic() + 30
        while len(list(directory.glob("control-*.sock"))) < 2:
            assert all(proc.poll() is None for proc in procs)
            assert time.monotonic() < deadline, "no control sockets"
            time.sleep(0.05)
        assert stat.S_IMODE(directory.stat().st_mode) == 0o700
        for path in directory.glob("control-*.sock"):
            port = path.stem.removeprefix("control-")
            status = leveret("ctl", "status", "--formatter", "json", "--port", port)
            assert status.returncode == 0, status.stderr
            listeners = json.loads(status.stdout)["listeners"]
            assert {"protocol": "amqp", "interface": "127.0.0.1", "port": int(port)} in listeners
            # LEVERET_PORT finds it too, as `leveret serve` reads it.
            monkeypatch.setattr("tests.control.conftest.ENV", {**env, "LEVERET_PORT": port})
            assert leveret("diagnostics", "-q", "ping").stdout == "Ping succeeded\n"
            monkeypatch.setattr("tests.control.conftest.ENV", env)
    finally:
        for proc in procs:
            stop_node(Node(proc, tmp_path))
    assert list(directory.glob("control-*.sock")) == []  # removed at a clean stop


def test_a_deep_data_directory_still_gets_its_socket(tmp_path: Path) -> None:
    deep = tmp_path / ("d" * 60) / ("e" * 60) / "data"
    assert len(str(deep / "control.sock")) > 108  # past what sun_path holds
    node = start_node(deep)
    try:
        assert node.ctl("-q", "ping").stdout == "Ping succeeded\n"
        assert (deep / "control.sock").exists()
    finally:
        stop_node(node)
