"""The seeds' topic binding keys (the "literal-first" mix): shared by ``pipeline_bench.py``,
``recovery.py`` and ``loadgen/topic.py`` (``from bench.topicwords import``, with the
repository root on ``sys.path``)."""

from __future__ import annotations

import random


def vocabulary(size: int = 1000) -> list[str]:
    """topicgen's vocabulary: ``wa``, ``wb``, ... (``w`` + base-26 letters)."""
    words = []
    for i in range(size):
        word, k = "", i
        while True:
            word = chr(97 + k % 26) + word
            k //= 26
            if k == 0:
                break
        words.append("w" + word)
    return words


def binding_words(rng: random.Random, vocab: list[str]) -> list[str]:
    """3-7 words: literal 70 %, ``*`` 20 %, ``#`` 10 % (never ``#.#``); first word literal."""
    words: list[str] = []
    for i in range(rng.randint(3, 7)):
        while True:
            r = 0.0 if i == 0 else rng.random()
            word = rng.choice(vocab) if r < 0.7 else ("*" if r < 0.9 else "#")
            if not (word == "#" and words and words[-1] == "#"):
                break
        words.append(word)
    return words
