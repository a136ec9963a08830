"""The package's one build step that pyproject.toml cannot state: the compiled build.

``pip install .`` installs the .py files as they are. ``LEVERET_COMPILE=1 pip install .``
also compiles the modules listed in build_support/compiled.txt to C extensions with mypyc
(installed next to their .py files; Python imports the extension first). mypyc reads the
type annotations the package is already checked with under mypy --strict, so the source
stays one. ``leveret --version`` says which build runs.
"""

from __future__ import annotations

import os
import shlex
import shutil
import sys
import sysconfig
from pathlib import Path

from setuptools import setup

ROOT = Path(__file__).resolve().parent
# The build backend (pyproject's backend-path) holds the rule for LEVERET_COMPILE; pip has it
# on the path already, a direct run of setup.py may not.
sys.path.insert(0, str(ROOT / "build_support"))
from backend import compile_requested  # noqa: E402

LIST = ROOT / "build_support" / "compiled.txt"
# The repository's folders as the installed package sees them (pyproject's package-dir).
PACKAGE_DIRS = {"broker": "leveret", "exchanges": "leveret/exchanges", "storage": "leveret/storage"}
# mypy reads a module's name off its path, and the name ``leveret`` exists only in packaging:
# the compiler is given a copy of the sources laid out as installed.
SHADOW = ROOT / "build" / "mypyc-src"
MYPY_INI = """\
[mypy]
python_version = 3.11
# Third-party packages are not installed in pip's isolated build environment; the broker's
# own modules are what mypyc compiles, and make typecheck checks everything strictly.
ignore_missing_imports = True
"""


def compiling() -> bool:
    """Whether this build compiles (``LEVERET_COMPILE`` set and not 0), and this run of
    setup.py builds: pip also runs it for the metadata alone, which needs no compiler."""
    return compile_requested() and not {"egg_info", "dist_info"} & set(sys.argv)


def compiled_sources() -> list[str]:
    """The repository paths in build_support/compiled.txt."""
    lines = (line.strip() for line in LIST.read_text().splitlines())
    return [line for line in lines if line and not line.startswith("#")]


def c_compiler() -> str | None:
    """The C compiler setuptools will call (``$CC``, else the one Python was built with)."""
    command = os.environ.get("CC") or sysconfig.get_config_var("CC") or "cc"
    words = shlex.split(command)
    return shutil.which(words[0]) if words else None


def shadow_tree() -> Path:
    """Copy the package's sources to build/mypyc-src/leveret, as installed."""
    shutil.rmtree(SHADOW, ignore_errors=True)
    for folder, target in PACKAGE_DIRS.items():
        shutil.copytree(
            ROOT / folder,
            SHADOW / target,
            ignore=shutil.ignore_patterns("__pycache__", "static", "*.so"),
            dirs_exist_ok=True,
        )
    (SHADOW / "mypy.ini").write_text(MYPY_INI)
    return SHADOW


def shadow_path(source: str) -> str:
    """Where a repository path of compiled.txt lies in the shadow tree."""
    folder, _, rest = source.partition("/")
    if folder not in PACKAGE_DIRS:
        raise SystemExit(f"error: build_support/compiled.txt: {source}: not in the package")
    return str(Path("build", "mypyc-src", PACKAGE_DIRS[folder], rest))


def extensions() -> list[object]:
    """The mypyc extensions of a compiled build."""
    if c_compiler() is None:
        raise SystemExit(
            "error: LEVERET_COMPILE=1 needs a C compiler (cc, or $CC), and none was found:"
            " install one (apt-get install gcc) or build without LEVERET_COMPILE"
        )
    from mypyc.build import mypycify

    shadow_tree()
    os.chdir(ROOT)  # mypycify's paths, and its build/ output, are relative to here
    return list(
        mypycify(
            ["--config-file", str(SHADOW / "mypy.ini")]
            + [shadow_path(source) for source in compiled_sources()],
            opt_level=os.environ.get("LEVERET_COMPILE_OPT", "3"),
            target_dir=str(ROOT / "build" / "mypyc"),
        )
    )


def clean_build_dirs() -> None:
    """Forget what an earlier build left in build/: setuptools copies everything in its
    build/lib* into the wheel, so a pure build would ship a compiled build's extensions (and
    a compiled build those of modules no longer in the list)."""
    for stale in [*ROOT.glob("build/lib.*"), *ROOT.glob("build/temp.*"), ROOT / "build" / "lib"]:
        shutil.rmtree(stale, ignore_errors=True)


if __name__ == "__main__":
    if not {"egg_info", "dist_info"} & set(sys.argv):
        clean_build_dirs()
    setup(ext_modules=extensions() if compiling() else [])
