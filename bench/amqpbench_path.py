"""``amqpwire`` (raw AMQP frames, from ``../shared/amqpbench``) for the bench scripts that
speak the protocol themselves (``queue_features.py``, ``persistent.py``, ``backlog.py``).

amqpbench is found at ``$AMQPBENCH``, else the working directory if it holds ``amqpwire.py``
(``run.py`` runs scripts there), else ``../shared/amqpbench`` from the repository root.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path


def amqpbench_dir() -> Path:
    """The amqpbench directory (exits with a message when there is none)."""
    here = Path(__file__).resolve().parent
    candidates = [os.environ.get("AMQPBENCH"), os.getcwd(), here.parent.parent / "shared/amqpbench"]
    for candidate in candidates:
        if candidate and (Path(candidate) / "amqpwire.py").is_file():
            return Path(candidate).resolve()
    raise SystemExit("amqpwire.py not found: set AMQPBENCH to the amqpbench directory")


sys.path.insert(0, str(amqpbench_dir()))

import amqpwire  # noqa: E402

__all__ = ["amqpbench_dir", "amqpwire"]
