"""The build backend: setuptools, plus mypy (which ships mypyc) when ``LEVERET_COMPILE=1``.

``pip install .`` builds the pure-Python package and needs nothing but setuptools.
``LEVERET_COMPILE=1 pip install .`` compiles the modules listed in build_support/compiled.txt
(setup.py says how); pip builds in an isolated environment, so the compiler must be asked for
here, as a build requirement of this build only. This is the in-tree backend setuptools
documents for dynamic build requirements ("Dynamic build dependencies and other build_meta
tweaks", setuptools' build_meta docs).
"""

from __future__ import annotations

import os

from setuptools import build_meta as _orig
from setuptools.build_meta import *  # noqa: F403  (the rest of the PEP 517 hooks, unchanged)

# mypyc comes with mypy; 1.10 is the oldest release the broker's own typecheck is run with.
COMPILER = "mypy>=1.10"


def compile_requested() -> bool:
    """Whether this build is asked to compile: ``LEVERET_COMPILE`` set and not 0 (the one
    place that reads it; setup.py asks here too)."""
    return os.environ.get("LEVERET_COMPILE", "") not in ("", "0")


def compiler_requirements() -> list[str]:
    """What this build needs beyond setuptools: mypy when it compiles, else nothing."""
    return [COMPILER] if compile_requested() else []


def get_requires_for_build_wheel(config_settings: dict[str, str] | None = None) -> list[str]:
    """setuptools' own requirements, plus mypy when this build compiles."""
    return list(_orig.get_requires_for_build_wheel(config_settings)) + compiler_requirements()


def get_requires_for_build_editable(config_settings: dict[str, str] | None = None) -> list[str]:
    """As for a wheel: an editable install may compile too."""
    return list(_orig.get_requires_for_build_editable(config_settings)) + compiler_requirements()
