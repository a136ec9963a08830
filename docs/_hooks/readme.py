"""mkdocs hook: the site's home page is the repository's README.md, so the two never differ.

Links into ``docs/`` become links between pages; links to other files of the repository
(ARCHITECTURE.md, bench/...) become code spans naming the file, since the site holds only
``docs/``.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

README = Path(__file__).resolve().parents[2] / "README.md"
REPO_LINK = re.compile(r"\[([^\]]+)\]\(((?!docs/|https?://)[^)]+)\)")


def home_page(readme: str) -> str:
    """README.md's text as the site's index.md."""
    text = readme.replace("](docs/", "](")
    return REPO_LINK.sub(r"`\2`", text)


def on_page_read_source(page: Any, config: Any) -> str | None:
    """Serve README.md for index.md; every other page as it is."""
    if page.file.src_uri == "index.md":
        return home_page(README.read_text())
    return None
