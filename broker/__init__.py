"""Leveret: an AMQP 0-9-1 broker on asyncio that behaves like RabbitMQ.

``broker`` is the asyncio shell: sockets, frames, connections, channels, queues. It is
the only layer that knows the wire; routing lives in :mod:`exchanges`, durable bytes in
:mod:`storage`.

The root holds the entry points only: :mod:`leveret.cli` (``leveret serve``, ``ctl``,
``diagnostics``), :mod:`leveret.server` (the composition root, which builds the state and
starts the listeners), :mod:`leveret.settings` and :mod:`leveret.config` (what it is
configured with), :mod:`leveret.testing` (the pytest plugin) and :mod:`leveret.faults`
(injected faults). Below them, one package per layer, each stating its rule at its door:
the operator side (:mod:`leveret.management`, :mod:`leveret.control`,
:mod:`leveret.inspect`), then :mod:`leveret.wire` -> :mod:`leveret.session` ->
:mod:`leveret.node` (with :mod:`leveret.trace` beside it). Imports only go down; no import
circle closes but a package and its own child (``tests/test_layers.py`` enforces both).
"""

import functools
from importlib.machinery import EXTENSION_SUFFIXES
from pathlib import Path

__version__ = "0.2.0"

COMPILED = "compiled"
PURE = "pure Python"


@functools.cache
def build_kind() -> str:
    """Which build of the package runs: ``"compiled"`` when its hot modules are C extensions
    (``LEVERET_COMPILE=1 pip install .``, setup.py), else ``"pure Python"``.

    Python imports an extension before the .py file beside it, so an extension anywhere in
    the installed package is what runs.
    """
    root = Path(__file__).resolve().parent
    for suffix in EXTENSION_SUFFIXES:
        if next(root.rglob(f"*{suffix}"), None) is not None:
            return COMPILED
    return PURE
