"""The two builds of one package: ``pip install .`` stays pure Python and asks for nothing
more than setuptools; ``LEVERET_COMPILE=1 pip install .`` asks for mypy (mypyc) and a C
compiler, and says in one line when there is none. (That the compiled build behaves as the
pure one is the whole suite's second pass: make unit-compiled.)"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

# IGNORED: what a checkout grows that is not its source
from tests.test_wheel import IGNORED, build_environment

ROOT = Path(__file__).resolve().parents[1]
NO_COMPILER = (
    "error: LEVERET_COMPILE=1 needs a C compiler (cc, or $CC), and none was found:"
    " install one (apt-get install gcc) or build without LEVERET_COMPILE"
)


def build_requirements(compile_flag: str | None) -> list[str]:
    """What the in-tree backend asks pip to install before building a wheel."""
    env = {k: v for k, v in os.environ.items() if k != "LEVERET_COMPILE"}
    if compile_flag is not None:
        env["LEVERET_COMPILE"] = compile_flag
    script = (
        "import sys; sys.path.insert(0, 'build_support'); import backend;"
        " print('\\n'.join(backend.compiler_requirements()))"
    )
    done = subprocess.run(
        [sys.executable, "-c", script],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return done.stdout.split()


@pytest.mark.parametrize("flag", [None, "", "0"])
def test_the_pure_build_needs_no_compiler(flag: str | None) -> None:
    assert not [r for r in build_requirements(flag) if r.startswith("mypy")]


def test_the_compiled_build_asks_for_mypyc() -> None:
    assert "mypy>=1.10" in build_requirements("1")


def test_without_a_c_compiler_the_compiled_build_says_so_in_one_line(tmp_path: Path) -> None:
    source = tmp_path / "leveret"
    shutil.copytree(ROOT, source, ignore=IGNORED)
    env = build_environment(LEVERET_COMPILE="1", CC=str(tmp_path / "no-such-cc"))
    done = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "--target", tmp_path / "out", "."],
        cwd=source,
        env=env,
        capture_output=True,
        text=True,
        timeout=540,
    )
    output = done.stdout + done.stderr
    assert done.returncode != 0
    # pip frames what the build printed: "[1 lines of output]", then the line itself.
    assert "[1 lines of output]" in output, output
    assert NO_COMPILER in output, output
    assert "Traceback" not in output
    assert not (tmp_path / "out" / "leveret").exists()
