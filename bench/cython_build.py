#!/usr/bin/env python3
"""Build Leveret with Cython 3 in pure-Python mode, for the compiler comparison of issue 34.

The other side of the comparison is the mypyc build (``LEVERET_COMPILE=1 pip install .``,
setup.py). This script compiles the same modules from the same ``.py`` files, so the two can be
measured on equal terms; it is a bench tool, not a build of the package (no ``.pyx`` files, no
generated C in git, nothing in setup.py).

  .venv/bin/python bench/cython_build.py                 # -> build/cython
  .venv/bin/python bench/cython_build.py --target DIR --directive binding=False
  PYTHONPATH=build/cython .venv/bin/python -m leveret serve ...

Steps: ``pip install --no-deps --target DIR .`` (the pure build, laid out as installed), then
each module listed in build_support/compiled.txt (the one list, read through setup.py) is
cythonized from its installed ``.py`` (``language_level=3``; annotation typing on, as Cython 3
has it by default) and compiled with the system's C compiler into a ``.so`` beside that
``.py``, which Python then imports first. A module Cython cannot compile stays pure; the script
says why and lists it at the end (exit 0 all the same: the build runs, with fewer modules
compiled). Cython itself (``Cython>=3.0``, the ``bench`` extra) is installed into the running
interpreter's environment if it is missing.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))
# setup.py holds the list's reader and the folder-to-package map; reused, not copied.
from setup import PACKAGE_DIRS, c_compiler, compiled_sources  # noqa: E402

CYTHON_REQUIREMENT = "Cython>=3.0"
PIP_INSTALL = [sys.executable, "-m", "pip", "install", "-q", "--disable-pip-version-check"]


@dataclass
class Outcome:
    """What became of one module of the list."""

    source: str  # the repository path, as in compiled.txt
    module: str  # the dotted name, as installed
    seconds: float
    extension: Path | None = None  # the .so, when it compiled
    error: str = ""


def ensure_cython() -> str:
    """Import Cython 3, installing it with pip first if it is missing or older; its version."""
    try:
        import Cython

        if int(Cython.__version__.split(".")[0]) >= 3:
            return str(Cython.__version__)
    except ImportError:
        pass
    print(f"installing {CYTHON_REQUIREMENT} into {sys.prefix}", flush=True)
    subprocess.run(
        [*PIP_INSTALL, CYTHON_REQUIREMENT],
        check=True,
    )
    for name in [n for n in sys.modules if n == "Cython" or n.startswith("Cython.")]:
        del sys.modules[name]
    import Cython

    return str(Cython.__version__)


def pure_install(target: Path) -> None:
    """``pip install --no-deps --target TARGET .``: the pure build, as a user would get it."""
    shutil.rmtree(target, ignore_errors=True)
    env = {k: v for k, v in os.environ.items() if k != "LEVERET_COMPILE"}
    subprocess.run(
        [*PIP_INSTALL, "--no-deps", "--target", str(target), str(REPO_ROOT)],
        check=True,
        env=env,
        cwd=REPO_ROOT,
    )


def installed(source: str) -> tuple[str, Path]:
    """A repository path of compiled.txt as installed: its dotted module name and its path
    relative to the target directory."""
    folder, _, rest = source.partition("/")
    if folder not in PACKAGE_DIRS:
        raise SystemExit(f"error: build_support/compiled.txt: {source}: not in the package")
    path = Path(PACKAGE_DIRS[folder], rest)
    parts = list(path.with_suffix("").parts)
    if parts[-1] == "__init__":  # a package: Python imports its __init__.<suffix>.so
        parts.pop()
    return ".".join(parts), path


def compile_one(source: str, target: Path, scratch: Path, directives: dict[str, object]) -> Outcome:
    """Cythonize and compile one installed module in place; a failure is returned, not raised."""
    from Cython.Build import cythonize
    from setuptools import Distribution, Extension

    module, relative = installed(source)
    started = time.perf_counter()
    outcome = Outcome(source, module, 0.0)
    try:
        # The extension's name keeps the file's stem, so a package's __init__.py becomes
        # <package>/__init__.<suffix>.so (Cython names the init function after the package).
        name = ".".join(relative.with_suffix("").parts)
        (extension,) = cythonize(
            [Extension(name, [str(relative)])],
            compiler_directives={"language_level": 3, **directives},
            build_dir=str(scratch / "c"),
            quiet=True,
            force=True,
        )
        dist = Distribution({"ext_modules": [extension]})
        build_ext = dist.get_command_obj("build_ext")
        build_ext.build_lib = str(target)  # the .so lands beside the installed .py
        build_ext.build_temp = str(scratch / "o")
        build_ext.ensure_finalized()
        build_ext.run()
        outcome.extension = Path(build_ext.get_ext_fullpath(extension.name))
    except (Exception, SystemExit) as error:  # Cython and distutils report failures both ways
        outcome.error = f"{type(error).__name__}: {error}".strip()
    outcome.seconds = time.perf_counter() - started
    return outcome


def parse_directive(text: str) -> tuple[str, object]:
    """``name=value`` with Python literals True/False/ints, as ``cython -X`` takes them."""
    name, sep, value = text.partition("=")
    if not sep or not name:
        raise argparse.ArgumentTypeError(f"--directive {text}: expected NAME=VALUE")
    literal: object = {"True": True, "False": False}.get(value, value)
    if isinstance(literal, str) and literal.lstrip("-").isdigit():
        literal = int(literal)
    return name, literal


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--target",
        type=Path,
        default=REPO_ROOT / "build" / "cython",
        help="directory to build into, replaced (default: build/cython)",
    )
    parser.add_argument(
        "--directive",
        action="append",
        type=parse_directive,
        default=[],
        metavar="NAME=VALUE",
        help="a Cython compiler directive on top of language_level=3 (repeatable),"
        " e.g. binding=False or annotation_typing=False",
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if c_compiler() is None:
        print("error: no C compiler (cc, or $CC) found: install one (apt-get install gcc)")
        return 69
    target = args.target.resolve()
    directives = dict(args.directive)
    started = time.perf_counter()
    version = ensure_cython()
    pure_install(target)
    pure_s = time.perf_counter() - started
    print(f"Cython {version}; directives language_level=3 {directives or ''}".rstrip())
    print(f"pure install into {target}: {pure_s:.1f} s")
    outcomes = []
    with tempfile.TemporaryDirectory(prefix="leveret-cython-") as scratch:
        os.chdir(target)  # cythonize and build_ext take the installed layout's relative paths
        for source in compiled_sources():
            outcome = compile_one(source, target, Path(scratch), directives)
            outcomes.append(outcome)
            if outcome.extension is not None:
                size = outcome.extension.stat().st_size
                print(
                    f"compiled {outcome.module:32} {outcome.seconds:6.1f} s {size:>9} B"
                    f"  {outcome.extension.relative_to(target)}",
                    flush=True,
                )
            else:
                print(f"FAILED   {outcome.module:32} {outcome.seconds:6.1f} s  (left pure)")
                print("  " + outcome.error.replace("\n", "\n  "), flush=True)
    failed = [o.module for o in outcomes if o.extension is None]
    total = sum(o.extension.stat().st_size for o in outcomes if o.extension is not None)
    print(
        f"{len(outcomes) - len(failed)}/{len(outcomes)} modules compiled, {total} B of"
        f" extensions; build {time.perf_counter() - started:.1f} s"
        f" (pure install {pure_s:.1f} s, Cython + C {sum(o.seconds for o in outcomes):.1f} s)"
    )
    if failed:
        print("left pure: " + " ".join(failed))
    return 0


if __name__ == "__main__":
    sys.exit(main())
