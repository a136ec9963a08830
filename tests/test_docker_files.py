"""docker/ cannot be built here (no Docker engine): check that what the Dockerfile and
compose file rely on exists, so they do not rot while the CLI changes."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOCKERFILE = (ROOT / "docker" / "Dockerfile").read_text()


def exec_form(instruction: str) -> list[str]:
    """The JSON array of a CMD/HEALTHCHECK instruction (continuations joined)."""
    text = DOCKERFILE.replace("\\\n", " ")
    match = re.search(rf"^{instruction}\b[^\[\n]*(\[.*\])\s*$", text, re.MULTILINE)
    assert match, f"no exec-form {instruction} in the Dockerfile"
    return list(json.loads(match.group(1)))


def serve_help() -> str:
    return subprocess.run(
        [sys.executable, "-m", "leveret", "serve", "--help"],
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
    ).stdout


def test_cmd_runs_leveret_serve_with_existing_flags() -> None:
    cmd = exec_form("CMD")
    assert cmd[:2] == ["leveret", "serve"]
    help_text = serve_help()
    for flag in (arg for arg in cmd[2:] if arg.startswith("--")):
        assert flag in help_text, flag
    # The console script the CMD names is declared by the package.
    assert 'leveret = "leveret.cli:main"' in (ROOT / "pyproject.toml").read_text()


def test_ports_volume_user_and_healthcheck() -> None:
    assert re.search(r"^EXPOSE 5672 15672 15692$", DOCKERFILE, re.MULTILINE)
    assert re.search(r"^VOLUME /data$", DOCKERFILE, re.MULTILINE)
    assert re.search(r"^USER leveret$", DOCKERFILE, re.MULTILINE)
    health = exec_form("HEALTHCHECK")
    # `leveret diagnostics ping` on the data dir the CMD serves: no credentials involved.
    assert health[:4] == ["leveret", "diagnostics", "-q", "ping"]
    cmd = exec_form("CMD")
    assert health[health.index("--data-dir") + 1] == cmd[cmd.index("--data-dir") + 1]
    ping_help = subprocess.run(
        [sys.executable, "-m", "leveret", "diagnostics", "ping", "--help"],
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
    ).stdout
    for flag in (arg for arg in health if arg.startswith("-")):
        assert flag in ping_help, flag
    compose = (ROOT / "docker" / "compose.yaml").read_text()
    assert '"CMD", "leveret", "diagnostics", "-q", "ping", "--data-dir", "/data"' in compose


def test_copy_sources_and_compose_build_context_exist() -> None:
    for line in DOCKERFILE.splitlines():
        if line.startswith("COPY "):
            sources = line.split()[1:-1]
            for source in sources:
                assert (ROOT / source).exists(), source
    compose = (ROOT / "docker" / "compose.yaml").read_text()
    assert "dockerfile: docker/Dockerfile" in compose
    assert (ROOT / "docker" / ".dockerignore").exists()
