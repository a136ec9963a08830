"""The wheel as a user gets it: built from the sources, installed into a clean venv, used by a
project that has packages of its own named ``broker``, ``exchanges``, ``storage`` and
``pipeline`` (common names in messaging code, which Leveret must not shadow).

Slow (a venv and an install from the package index), so one build serves every check.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import venv
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

import leveret

ROOT = Path(__file__).resolve().parents[1]
# Not sources: what a checkout grows while it is worked in.
IGNORED = shutil.ignore_patterns(
    ".git", ".venv", "build", "dist", "data", "*.egg-info", "__pycache__", ".*_cache", "results"
)

USER_TEST = """
import broker
import exchanges
import pipeline
import storage


def test_the_projects_own_packages_are_imported():
    assert (broker.NAME, exchanges.NAME, storage.NAME, pipeline.NAME) == (
        "my broker", "my exchanges", "my storage", "my pipeline"
    )


def test_the_plugins_fixtures_serve_this_project(pika_connection, leveret):
    channel = pika_connection.channel()
    channel.queue_declare("orders")
    channel.basic_publish("", "orders", b"order 1")
    assert leveret.wait_for_messages("orders", 1).messages_ready == 1
    method, _, body = channel.basic_get("orders", auto_ack=True)
    assert body == b"order 1"
"""


def build_environment(**extra: str) -> dict[str, str]:
    """This process's environment without its Python settings (PYTHONDONTWRITEBYTECODE makes
    setuptools warn; PYTHONPATH would reach the checkout), plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV"))}
    return env | extra


def run(*argv: str | Path, cwd: Path) -> str:
    """stdout + stderr of a command that must succeed (both shown when it does not), in the
    :func:`build_environment`."""
    done = subprocess.run(
        [str(arg) for arg in argv],
        cwd=cwd,
        env=build_environment(),
        capture_output=True,
        text=True,
        timeout=540,
    )
    output = done.stdout + done.stderr
    assert done.returncode == 0, f"{argv} exited {done.returncode}:\n{output}"
    return output


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, str]]:
    """The wheel built from a copy of the sources (so the checkout gains no build/ or
    egg-info), and what the build printed."""
    work = tmp_path_factory.mktemp("wheel")
    source = work / "source"
    shutil.copytree(ROOT, source, ignore=IGNORED)
    output = run(
        sys.executable, "-m", "build", "--wheel", "--outdir", work / "dist", ".", cwd=source
    )
    (wheel,) = (work / "dist").glob("leveret-*.whl")
    yield wheel, output


def test_the_wheel_holds_one_namespace_and_the_page(built: tuple[Path, str]) -> None:
    wheel, _ = built
    names = zipfile.ZipFile(wheel).namelist()
    dist_info = f"leveret-{leveret.__version__}.dist-info/"
    assert [name for name in names if not name.startswith(("leveret/", dist_info))] == []
    for packaged in (
        "leveret/__main__.py",
        "leveret/py.typed",
        "leveret/testing.py",
        "leveret/exchanges/routing.py",
        "leveret/storage/log.py",
        "leveret/pipeline/job.py",
        "leveret/pipeline/fairscheduler.xml",
        *(
            f"leveret/management/{f.relative_to(ROOT / 'broker/management').as_posix()}"
            for f in (ROOT / "broker/management/static").rglob("*")
            if f.is_file()
        ),
    ):
        assert packaged in names
    metadata = zipfile.ZipFile(wheel).read(dist_info + "METADATA").decode()
    assert "License-Expression: MIT" in metadata
    licence = zipfile.ZipFile(wheel).read(dist_info + "licenses/LICENSE").decode()
    assert licence == (ROOT / "LICENSE").read_text()
    assert licence.startswith("MIT License")
    entry_points = zipfile.ZipFile(wheel).read(dist_info + "entry_points.txt").decode()
    assert "leveret = leveret.testing" in entry_points
    assert "leveret = leveret.cli:main" in entry_points


def test_the_build_prints_no_warnings(built: tuple[Path, str]) -> None:
    _, output = built
    assert [line for line in output.splitlines() if "warning" in line.lower()] == []


@pytest.mark.timeout(600)
def test_a_project_with_its_own_broker_package_runs_its_tests(
    built: tuple[Path, str], tmp_path: Path
) -> None:
    wheel, _ = built
    venv.create(tmp_path / "venv", with_pip=True)
    python = tmp_path / "venv" / "bin" / "python"
    quiet = ("-q", "--disable-pip-version-check")
    run(python, "-m", "pip", "install", *quiet, wheel, "pytest>=8.0", "pika>=1.3", cwd=tmp_path)

    project = tmp_path / "project"
    for package in ("broker", "exchanges", "storage", "pipeline"):
        (project / package).mkdir(parents=True)
        (project / package / "__init__.py").write_text(f'NAME = "my {package}"\n')
    (project / "tests").mkdir()
    (project / "tests" / "test_orders.py").write_text(USER_TEST)
    output = run(python, "-m", "pytest", "-q", "-p", "no:cacheprovider", cwd=project)
    assert "2 passed" in output

    # The script and ``python -m`` both answer from the namespace.
    # The wheel is the pure-Python build (no LEVERET_COMPILE).
    assert run(tmp_path / "venv" / "bin" / "leveret", "--version", cwd=project) == (
        f"leveret {leveret.__version__} (pure Python)\n"
    )
    assert "serve" in run(python, "-m", "leveret", "--help", cwd=project)
    site = Path(
        run(
            python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])", cwd=project
        ).strip()
    )
    assert (site / "leveret" / "__init__.py").is_file()
    assert [
        name for name in ("broker", "exchanges", "storage", "pipeline") if (site / name).exists()
    ] == []
