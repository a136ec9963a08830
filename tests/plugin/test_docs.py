"""docs/testing.md's examples work as they are: each ``python`` block that starts with a
file name comment (``# test_x.py``, ``# conftest.py``) is written into a clean project and
run with pytest; the other blocks run as scripts."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

pytest_plugins = ["pytester"]

DOC = Path(__file__).resolve().parents[2] / "docs" / "testing.md"
BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)
FILE_NAME = re.compile(r"# ((?:test_\w+|conftest)\.py)\n")


# The section whose examples are a project of their own: its conftest.py gives the broker
# a data directory (restart() needs one), which the other examples' conftest.py does not.
FAULTS = "\n## Injected faults\n"


def blocks(faults: bool = False) -> tuple[dict[str, str], list[str]]:
    """(file name -> code) of the named blocks, and the code of the others: those before
    the "Injected faults" section, or (``faults``) those in it."""
    files: dict[str, str] = {}
    scripts: list[str] = []
    before, _, section = DOC.read_text().partition(FAULTS)
    for code in BLOCK.findall(section if faults else before):
        named = FILE_NAME.match(code)
        if named:
            files[named.group(1)] = code[named.end() :]
        else:
            scripts.append(code)
    return files, scripts


def run_project(pytester: pytest.Pytester, files: dict[str, str]) -> None:
    """Write ``files`` into a clean project and check that every test in them passes."""
    pytester.makeini("[pytest]\nasyncio_default_fixture_loop_scope = function\n")
    for name, code in files.items():
        (pytester.path / name).write_text(code)
    result = pytester.runpytest("-p", "no:cacheprovider")
    expected = sum(len(re.findall(r"^(?:async )?def test_", c, re.M)) for c in files.values())
    result.assert_outcomes(passed=expected)


def test_every_example_runs(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LEVERET_URL", raising=False)
    monkeypatch.delenv("LEVERET_MANAGEMENT_URL", raising=False)
    files, _scripts = blocks()
    assert {"test_pika_example.py", "test_aio_pika_example.py", "test_kombu_example.py"} <= set(
        files
    )
    assert {"test_celery_example.py", "test_inspector_example.py", "conftest.py"} <= set(files)
    assert {
        "test_clock_example.py",
        "test_clock_aio_pika_example.py",
        "test_clock_celery_example.py",
        "test_clock_faststream_example.py",
        "test_journal_pika_example.py",
        "test_journal_aio_pika_example.py",
        "test_journal_celery_example.py",
        "test_journal_faststream_example.py",
    } <= set(files)
    run_project(pytester, files)


def test_fault_examples_run(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LEVERET_URL", raising=False)
    monkeypatch.delenv("LEVERET_MANAGEMENT_URL", raising=False)
    files, scripts = blocks(faults=True)
    assert not scripts
    assert {
        "conftest.py",
        "test_faults_pika_example.py",
        "test_faults_aio_pika_example.py",
        "test_faults_celery_example.py",
        "test_faults_faststream_example.py",
    } <= set(files)
    run_project(pytester, files)


def test_scripts_run() -> None:
    _files, scripts = blocks()
    assert scripts
    for code in scripts:
        exec(compile(code, str(DOC), "exec"), {"__name__": "__doc_example__"})
