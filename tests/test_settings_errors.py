"""What a user sees for a refused setting: ``leveret serve`` in a real subprocess exits at
once with status 2 (1 when the broker cannot start: data directory, port) and exactly one
line on stderr, ``leveret: error: ...``, naming the flag, the variable, or the file and
key (the line for a TOML syntax error); never a traceback, and never a broker started with
a value every client would fail on."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from leveret.node.auth import hash_password

ROOT = Path(__file__).resolve().parents[1]


def leveret(
    *args: str, cwd: Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """``python -m leveret ARGS`` without the caller's LEVERET_* variables."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("LEVERET_")}
    return subprocess.run(
        [sys.executable, "-m", "leveret", *args],
        cwd=cwd,
        env={**clean, "PYTHONPATH": str(ROOT), **(env or {})},
        capture_output=True,
        text=True,
        timeout=20,
    )


def refused(result: subprocess.CompletedProcess[str], *names: str, status: int = 2) -> str:
    """The one error line, after checking the status, the form and the names in it."""
    assert "Traceback" not in result.stderr, result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    line = lines[0]
    assert line.startswith("leveret: error: "), line
    for name in names:
        assert name in line, (name, line)
    assert result.returncode == status, (result.returncode, line)
    return line


# A start that is not refused would serve: these keep it from binding the usual ports.
QUIET = ("--port", "0", "--management-port", "-1")

# setting, a refused value as a flag or variable gives it, the same value in TOML (more
# values, in-process: tests/test_settings_values.py).
BAD_VALUES = [
    ("port", "abc", '"abc"'),
    ("port", "99999", "99999"),
    ("management_port", "-2", "-2"),
    ("channel_max", "70000", "70000"),
    ("heartbeat", "-5", "-5"),
    ("frame_max", "100", "100"),
    ("consumer_timeout", "soon", '"soon"'),
    ("memory_high_watermark", "2XB", '"2XB"'),
    ("memory_high_watermark", "1.5", "1.5"),
    ("log_level", "verbose", '"verbose"'),
]


@pytest.mark.parametrize(("name", "value", "toml"), BAD_VALUES)
@pytest.mark.parametrize("form", ["flag", "env", "toml"])
def test_a_bad_value_is_one_line_naming_its_source(
    tmp_path: Path, form: str, name: str, value: str, toml: str
) -> None:
    flag = "--" + name.replace("_", "-")
    variable = "LEVERET_" + name.upper()
    # QUIET without this setting's own flag, which would take precedence.
    quiet = [
        a for pair in zip(QUIET[::2], QUIET[1::2], strict=True) if pair[0] != flag for a in pair
    ]
    if form == "flag":
        line = refused(leveret("serve", *quiet, flag, value, cwd=tmp_path), flag, repr(value))
    elif form == "env":
        result = leveret("serve", *quiet, cwd=tmp_path, env={variable: value})
        line = refused(result, variable, repr(value))
    else:
        config = tmp_path / "leveret.toml"
        config.write_text(f"{name} = {toml}\n")
        result = leveret("serve", *quiet, "--config", str(config), cwd=tmp_path)
        line = refused(result, str(config), f"key '{name}'", toml)
    assert "expected" in line or "must" in line or "unknown unit" in line


def test_a_range_error_says_the_range(tmp_path: Path) -> None:
    line = refused(leveret("serve", "--port", "99999", cwd=tmp_path))
    assert line == (
        "leveret: error: argument --port: invalid value '99999': "
        "expected an integer from 0 to 65535"
    )


def test_the_watermark_error_lists_rabbitmqs_units(tmp_path: Path) -> None:
    line = refused(leveret("serve", "--memory-high-watermark", "2XB", cwd=tmp_path))
    assert "unknown unit 'XB'" in line
    for unit in ("kB", "MB", "GB", "KiB", "MiB", "GiB"):
        assert unit in line


@pytest.mark.parametrize(
    ("text", "names"),
    [
        ("prot = 5672\n", ["unknown key 'prot' (did you mean 'port'?)"]),
        ('data-dir = "d"\n', ["unknown key 'data-dir' (did you mean 'data_dir'?)"]),
        ('vhosts = "orders"\n', ["key 'vhosts'", '"orders"', "expected a list of strings"]),
        ('vhosts = ["/", 3]\n', ["key 'vhosts[1]'", "expected a valid string"]),
        ('loopback_users = "guest"\n', ["key 'loopback_users'", "list of strings"]),
        ('port = "5672"\n', ["key 'port'", '"5672"']),
        ("port = true\n", ["key 'port'", "true"]),
        ("heartbeat = 5.0\n", ["key 'heartbeat'", "5.0"]),
        ("data_dir = 5\n", ["key 'data_dir'", "expected a path"]),
        ("host = 1979-05-27\n", ["key 'host'", "date"]),
        ("memory_high_watermark = true\n", ["key 'memory_high_watermark'"]),
        ("memory_high_watermark = nan\n", ["key 'memory_high_watermark': invalid value nan"]),
        ("users = 5\n", ["key 'users'", "table"]),
        ('[users.app]\npasword = "x"\n', ["unknown key 'users.app.pasword'"]),
        ('[users.app]\ntags = "management"\n', ["key 'users.app.tags'", "list of strings"]),
        ('[users.app]\npassword_hash = "x"\n', ["key 'users.app.password_hash'", "SHA-256"]),
        (
            f'[users.app]\npassword = "a"\npassword_hash = "{hash_password("a", b"salt")}"\n',
            ["key 'users.app'", "not both"],
        ),
        (
            '[users.app]\n[permissions.app."/"]\nconfigur = ".*"\n',
            ["unknown key 'permissions.app.\"/\".configur'"],
        ),
        ('[permissions.bob."/"]\nread = ".*"\n', ["key 'permissions.bob'", "'bob'"]),
        (
            '[users.bob]\n[permissions.bob."orders"]\nread = ".*"\n',
            ["key 'permissions.bob.orders'", "vhost 'orders'"],
        ),
    ],
)
def test_the_file_is_checked_key_by_key(tmp_path: Path, text: str, names: list[str]) -> None:
    config = tmp_path / "leveret.toml"
    config.write_text(text)
    result = leveret("serve", *QUIET, "--config", str(config), cwd=tmp_path)
    refused(result, str(config), *names)


@pytest.mark.parametrize("kind", ["configure", "write", "read"])
def test_an_invalid_permission_regex_is_refused_at_start(tmp_path: Path, kind: str) -> None:
    config = tmp_path / "leveret.toml"
    config.write_text(
        'vhosts = ["/", "orders"]\n[users.app]\npassword = "s3cret"\n'
        f'[permissions.app."orders"]\n{kind} = "^(app"\n'
    )
    line = refused(
        leveret("serve", *QUIET, "--config", str(config), cwd=tmp_path),
        str(config),
        f"key 'permissions.app.orders.{kind}'",
        '"^(app"',
        "invalid regular expression",
    )
    assert "missing )" in line


def test_a_toml_syntax_error_names_the_line(tmp_path: Path) -> None:
    config = tmp_path / "leveret.toml"
    config.write_text('host = "127.0.0.1"\nport = \nheartbeat = 10\n')
    line = refused(leveret("serve", *QUIET, "--config", str(config), cwd=tmp_path), str(config))
    assert f"{config}: line 2, column 8: invalid TOML" in line


def test_a_config_file_that_is_not_utf8(tmp_path: Path) -> None:
    config = tmp_path / "leveret.toml"
    config.write_bytes(b'host = "\xff"\n')
    refused(leveret("serve", *QUIET, "--config", str(config), cwd=tmp_path), str(config), "UTF-8")


@pytest.mark.parametrize("form", ["flag", "env"])
@pytest.mark.parametrize("what", ["missing", "directory"])
def test_a_config_file_that_cannot_be_read(tmp_path: Path, form: str, what: str) -> None:
    config = tmp_path / "leveret.toml"
    if what == "directory":
        config.mkdir()
    if form == "flag":
        result = leveret("serve", *QUIET, "--config", str(config), cwd=tmp_path)
    else:
        result = leveret("serve", *QUIET, cwd=tmp_path, env={"LEVERET_CONFIG": str(config)})
    line = refused(result, f"cannot read config file {config}")
    assert line.endswith("No such file or directory" if what == "missing" else "Is a directory")


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        (None, "No such file or directory"),
        ("{not json", "not valid JSON"),
        ("[1, 2]", "must be a JSON object"),
        ('{"users": "guest"}', "'users' must be a list"),
        ('{"queues": [{"name": "q", "vhost": "nowhere"}]}', "nowhere"),
    ],
)
def test_a_bad_definitions_file(tmp_path: Path, content: str | None, reason: str) -> None:
    definitions = tmp_path / "definitions.json"
    if content is not None:
        definitions.write_text(content)
    result = leveret("serve", *QUIET, "--load-definitions", str(definitions), cwd=tmp_path)
    refused(result, "--load-definitions", str(definitions), reason)


def test_unknown_flags_and_missing_values_are_one_line(tmp_path: Path) -> None:
    refused(leveret("serve", "--prot", "5672", cwd=tmp_path), "unrecognized arguments: --prot")
    refused(leveret("serve", "--port", cwd=tmp_path), "argument --port: expected one argument")
    refused(leveret(cwd=tmp_path), "required: command")


def test_tls_certificate_without_key(tmp_path: Path) -> None:
    (tmp_path / "cert.pem").write_text("not a certificate")
    result = leveret("serve", *QUIET, "--tls-cert", "cert.pem", cwd=tmp_path)
    refused(result, "--tls-cert", "--tls-key")
    result = leveret(
        "serve", *QUIET, "--tls-cert", "cert.pem", "--tls-key", "cert.pem", cwd=tmp_path
    )
    refused(result, "--tls-cert cert.pem", "cannot load the certificate and key")


def test_a_data_directory_that_cannot_be_created(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    result = leveret("serve", *QUIET, "--data-dir", "file/data", cwd=tmp_path)
    line = refused(result, status=1)
    assert line == ("leveret: error: data directory file/data cannot be created: Not a directory")


def test_a_data_directory_on_a_filesystem_that_refuses_files(tmp_path: Path) -> None:
    # /proc takes no new files, even from root (a read-only directory would not stop root,
    # which CI runs as).
    result = leveret("serve", *QUIET, "--data-dir", "/proc/self", cwd=tmp_path)
    line = refused(result, "data directory /proc/self cannot be written: ", status=1)
    assert "cannot listen" not in line


def test_a_management_port_in_use(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = leveret(
            "serve", "--port", "0", "--management-port", str(port), "--log-level", "debug",
            cwd=tmp_path,
        )  # fmt: skip
    line = refused(result, status=1)
    assert line == f"leveret: error: cannot listen on 127.0.0.1:{port}: address already in use"


def test_every_bad_value_of_a_source_is_on_the_one_line(tmp_path: Path) -> None:
    config = tmp_path / "leveret.toml"
    config.write_text('prot = 1\nport = -3\nvhosts = "orders"\n')
    line = refused(leveret("serve", "--config", str(config), cwd=tmp_path), str(config))
    assert "unknown key 'prot'" in line
    assert "key 'port': invalid value -3" in line
    assert "key 'vhosts'" in line


def test_a_bad_variable_is_refused_even_when_a_flag_overrides_it(tmp_path: Path) -> None:
    result = leveret("serve", "--port", "0", cwd=tmp_path, env={"LEVERET_PORT": "99999"})
    refused(result, "environment variable LEVERET_PORT: invalid value '99999'")
