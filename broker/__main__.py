"""``python -m leveret serve ...``."""

from leveret.cli import main

raise SystemExit(main())
