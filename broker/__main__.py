"""``python -m broker serve ...``."""

from broker.cli import main

raise SystemExit(main())
