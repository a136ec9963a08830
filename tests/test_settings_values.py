"""Settings in-process: the edge values each setting accepts (and a few it refuses) from a
flag, a variable and the file; the memory watermark's forms as RabbitMQ's; the default
watermark in a container (a fake cgroup directory); a start with edge values."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pika
import pytest

from leveret.cli import build_parser, config_from
from leveret.config import Config
from leveret.node.memory import (
    DEFAULT_FRACTION,
    Watermark,
    cgroup_memory_limit,
    default_watermark,
    physical_memory,
    total_memory,
)
from leveret.settings import SETTINGS, ServeSettings, Settings, SettingsError, resolve
from tests.test_cli import free_port, wait_listening

ROOT = Path(__file__).resolve().parents[1]
GiB = 1024**3


def resolved(form: str, name: str, value: str, tmp_path: Path) -> Settings:
    """``name = value`` from a flag, a variable or the file (written as TOML text)."""
    if form == "flag":
        args = build_parser().parse_args(["serve", "--" + name.replace("_", "-"), value])
        return resolve(args, {})
    if form == "env":
        return resolve(build_parser().parse_args(["serve"]), {"LEVERET_" + name.upper(): value})
    config = tmp_path / "leveret.toml"
    config.write_text(f"{name} = {value}\n")
    return resolve(build_parser().parse_args(["serve", "--config", str(config)]), {})


def toml(value: str) -> str:
    """``value`` as TOML writes it: a number bare, anything else a string."""
    try:
        float(value)
    except ValueError:
        return f'"{value}"'
    return value


ACCEPTED: list[tuple[str, str, Any]] = [
    ("port", "0", 0),
    ("port", "65535", 65535),
    ("tls_port", "0", 0),
    ("management_port", "-1", -1),
    ("management_port", "0", 0),
    ("frame_max", "4096", 4096),
    ("frame_max", str(2**31 - 1), 2**31 - 1),
    ("channel_max", "0", 0),
    ("channel_max", "65535", 65535),
    ("heartbeat", "0", 0),
    ("heartbeat", "65535", 65535),
    ("max_connections", "0", 0),
    ("consumer_timeout", "0", 0),
    ("max_message_size", "1", 1),
    ("max_message_size", str(512 * 1024 * 1024), 512 * 1024 * 1024),
    ("memory_high_watermark", "0.4", Watermark(relative=0.4)),
    ("memory_high_watermark", "1.0", Watermark(relative=1.0)),
    ("memory_high_watermark", "2GiB", Watermark(absolute=2 * GiB)),
    ("memory_high_watermark", "1073741824", Watermark(absolute=GiB)),
    ("log_level", "debug", "debug"),
    ("log_level", "WARNING", "warning"),
    ("host", "::1", ("::1",)),
    ("data_dir", "data", Path("data")),
]


@pytest.mark.parametrize(("name", "value", "expected"), ACCEPTED)
@pytest.mark.parametrize("form", ["flag", "env", "toml"])
def test_edge_values_are_accepted(
    tmp_path: Path, form: str, name: str, value: str, expected: Any
) -> None:
    text = toml(value) if form == "toml" else value
    assert resolved(form, name, text, tmp_path).values[name] == expected


REFUSED = [
    ("port", "-1"),
    ("port", "65536"),
    ("tls_port", "65536"),
    ("management_port", "-2"),
    ("frame_max", "4095"),
    ("frame_max", str(2**31)),
    ("channel_max", "-1"),
    ("channel_max", "65536"),
    ("heartbeat", "-1"),
    ("heartbeat", "65536"),
    ("max_connections", "-1"),
    ("consumer_timeout", "-1"),
    ("max_message_size", "0"),
    ("max_message_size", str(512 * 1024 * 1024 + 1)),
    ("memory_high_watermark", "0"),
    ("memory_high_watermark", "-0.4"),
    ("memory_high_watermark", "1.5"),
    ("memory_high_watermark", "lots"),
    ("memory_high_watermark", "2 GiB"),
    ("memory_high_watermark", "2T"),
    ("log_level", "trace"),
]


@pytest.mark.parametrize(("name", "value"), REFUSED)
@pytest.mark.parametrize("form", ["flag", "env", "toml"])
def test_out_of_range_values_are_refused(tmp_path: Path, form: str, name: str, value: str) -> None:
    with pytest.raises(SettingsError) as refused:
        resolved(form, name, toml(value) if form == "toml" else value, tmp_path)
    where = {
        "flag": f"argument --{name.replace('_', '-')}",
        "env": f"environment variable LEVERET_{name.upper()}",
        "toml": f"key '{name}'",
    }[form]
    assert where in str(refused.value)


def test_every_setting_has_a_flag_a_variable_and_a_key() -> None:
    assert set(SETTINGS) <= set(vars(build_parser().parse_args(["serve"])))
    serve_help = subprocess.run(
        [sys.executable, "-m", "leveret", "serve", "--help"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    for name in SETTINGS:
        assert "--" + name.replace("_", "-") in serve_help
        assert "LEVERET_" + name.upper() in serve_help
    # The documented flags all still exist (the Dockerfile's are in test_docker_files.py).
    for flag in ("--tls-port", "--tls-cert", "--tls-key", "--tls-ca", "--load-definitions"):
        assert flag in serve_help


def test_defaults_are_rabbitmqs() -> None:
    defaults = ServeSettings()
    config = Config()
    for name in ("port", "frame_max", "channel_max", "heartbeat", "max_message_size"):
        assert getattr(defaults, name) == getattr(config, name), name
    assert defaults.consumer_timeout == config.consumer_timeout
    assert defaults.memory_high_watermark == Watermark(relative=DEFAULT_FRACTION)
    assert defaults.loopback_users == ("guest",)


def test_loopback_users_from_each_source(tmp_path: Path) -> None:
    assert resolved("flag", "loopback_users", "", tmp_path).values["loopback_users"] == ()
    env = resolved("env", "loopback_users", "guest,ops", tmp_path)
    assert env.values["loopback_users"] == ("guest", "ops")
    file = resolved("toml", "loopback_users", '["a", "b,c"]', tmp_path)
    assert file.values["loopback_users"] == ("a", "b,c")


def test_tls_files_may_come_from_different_sources(tmp_path: Path) -> None:
    config = tmp_path / "leveret.toml"
    config.write_text('tls_cert = "cert.pem"\n')
    args = build_parser().parse_args(["serve", "--config", str(config)])
    values = resolve(args, {"LEVERET_TLS_KEY": "key.pem"}).values
    assert (values["tls_cert"], values["tls_key"]) == (Path("cert.pem"), Path("key.pem"))
    with pytest.raises(SettingsError, match="--tls-cert is set without --tls-key"):
        resolve(args, {})


def test_management_port_minus_one_turns_the_api_off(tmp_path: Path) -> None:
    settings = resolved("flag", "management_port", "-1", tmp_path)
    assert config_from(settings).management_port is None


def test_permissions_of_guest_without_users_table(tmp_path: Path) -> None:
    config = tmp_path / "leveret.toml"
    config.write_text('[permissions.guest."/"]\nconfigure = "^guest\\\\."\nwrite = ".*"\n')
    settings = resolve(build_parser().parse_args(["serve", "--config", str(config)]), {})
    access = config_from(settings).access
    assert access is not None
    assert access.authenticate("guest", "guest") is not None
    assert access.can_access_vhost("guest", "/")
    permission = access.permissions[("guest", "/")]
    assert (permission.configure, permission.write, permission.read) == ("^guest\\.", ".*", "")


# -- the memory watermark -----------------------------------------------------------------

# RabbitMQ 3.13's information units (rabbit_resource_monitor_misc): since 3.13 k, M, G
# and P are powers of ten, as in Kubernetes; the "i" forms powers of two.
UNITS = [
    ("1073741824", GiB),
    ("1000k", 1000 * 1000),
    ("1000K", 1000 * 1000),
    ("1000kB", 1000 * 1000),
    ("1000KB", 1000 * 1000),
    ("1000Ki", 1000 * 1024),
    ("1000kiB", 1000 * 1024),
    ("1000KiB", 1000 * 1024),
    ("512M", 512 * 1000**2),
    ("512MB", 512 * 1000**2),
    ("512Mi", 512 * 1024**2),
    ("512MiB", 512 * 1024**2),
    ("2G", 2 * 1000**3),
    ("2GB", 2 * 1000**3),
    ("2Gi", 2 * GiB),
    ("2GiB", 2 * GiB),
    ("1TB", 1000**4),
    ("1TiB", 1024**4),
    ("1PB", 1000**5),
    ("1PiB", 1024**5),
]


@pytest.mark.parametrize(("text", "size"), UNITS)
def test_absolute_watermarks_as_rabbitmq(text: str, size: int) -> None:
    assert Watermark.parse(text) == Watermark(absolute=size)
    assert Watermark.parse(text).limit() == size


def test_relative_and_typed_watermarks() -> None:
    assert Watermark.parse("0.4") == Watermark(relative=0.4)
    assert Watermark.parse(0.6) == Watermark(relative=0.6)
    assert Watermark.parse(2048) == Watermark(absolute=2048)  # a TOML integer: bytes
    # A fraction of 0 blocks every publisher, as in RabbitMQ (docs/memory.md).
    assert Watermark.parse(0.0) == Watermark(relative=0.0)
    assert Watermark.parse("0.0") == Watermark(relative=0.0)
    for bad in (True, None, [], 0, -1, -0.1, 1.01, float("nan"), float("inf"), "", "1e9", "G"):
        with pytest.raises(ValueError):
            Watermark.parse(bad)


def fake_cgroup(root: Path, version: int, value: str) -> Path:
    path = root / "memory.max" if version == 2 else root / "memory" / "memory.limit_in_bytes"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(value + "\n")
    return root


@pytest.mark.parametrize("version", [1, 2])
def test_the_default_watermark_is_a_fraction_of_the_cgroup_limit(
    tmp_path: Path, version: int
) -> None:
    limit = 256 * 1024 * 1024
    assert physical_memory() > limit
    root = fake_cgroup(tmp_path, version, str(limit))
    assert cgroup_memory_limit(root) == limit
    assert total_memory(root) == limit
    assert default_watermark(root) == int(limit * 0.4)
    settings = resolve(build_parser().parse_args(["serve"]), {})
    assert config_from(settings, cgroup_root=root).memory_high_watermark == int(limit * 0.4)
    # An explicit fraction is of the same limit; an absolute size is what it says.
    half = resolve(build_parser().parse_args(["serve", "--memory-high-watermark", "0.5"]), {})
    assert config_from(half, cgroup_root=root).memory_high_watermark == limit // 2
    size = resolve(build_parser().parse_args(["serve", "--memory-high-watermark", "1GiB"]), {})
    assert config_from(size, cgroup_root=root).memory_high_watermark == GiB


@pytest.mark.parametrize(
    ("version", "value"),
    [
        (2, "max"),  # cgroup v2: no limit
        (1, "9223372036854771712"),  # cgroup v1: no limit (2^63 rounded down to a page)
        (2, str(1 << 62)),
        (2, "0"),
        (2, "garbage"),
        (2, str(1 << 50)),  # above the RAM: the RAM is the limit
    ],
)
def test_no_cgroup_limit_means_the_ram(tmp_path: Path, version: int, value: str) -> None:
    root = fake_cgroup(tmp_path, version, value)
    assert total_memory(root) == physical_memory()
    settings = resolve(build_parser().parse_args(["serve"]), {})
    expected = int(physical_memory() * 0.4)
    assert config_from(settings, cgroup_root=root).memory_high_watermark == expected


def test_no_cgroup_files_means_the_ram(tmp_path: Path) -> None:
    assert cgroup_memory_limit(tmp_path) is None
    assert total_memory(tmp_path) == physical_memory()


def test_cgroup_v2_is_read_before_v1(tmp_path: Path) -> None:
    fake_cgroup(tmp_path, 1, str(512 * 1024 * 1024))
    fake_cgroup(tmp_path, 2, str(128 * 1024 * 1024))
    assert cgroup_memory_limit(tmp_path) == 128 * 1024 * 1024


# -- real starts ---------------------------------------------------------------------------


def test_a_broker_starts_with_edge_values(tmp_path: Path) -> None:
    port = free_port()
    config = tmp_path / "leveret.toml"
    config.write_text('memory_high_watermark = "2GiB"\nloopback_users = []\nvhosts = ["/"]\n')
    proc = subprocess.Popen(
        [
            sys.executable, "-m", "leveret", "serve", "--port", str(port),
            "--management-port", "-1", "--frame-max", "4096", "--channel-max", "0",
            "--heartbeat", "0", "--config", str(config), "--log-level", "WARNING",
        ],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        wait_listening(port, proc)
        params = pika.URLParameters(f"amqp://guest:guest@127.0.0.1:{port}/?frame_max=131072")
        connection = pika.BlockingConnection(params)
        assert connection._impl.params.frame_max == 4096  # the server's offer wins
        assert connection._impl.params.heartbeat == 0
        channel = connection.channel()
        channel.queue_declare("edge", exclusive=True)
        channel.basic_publish("", "edge", b"x" * 10_000)  # spans frames of 4096 bytes
        _method, _properties, body = channel.basic_get("edge", auto_ack=True)
        assert body == b"x" * 10_000
        connection.close()
    finally:
        proc.terminate()
        assert proc.wait(10) == 0
    assert proc.stderr is not None
    assert proc.stderr.read() == b""  # --log-level WARNING: nothing to say
