"""The reverse topic index: literal binding keys, wildcard routing keys (``x-rtopic``).

The exchange type comes from the ``rabbitmq-rtopic-exchange`` plugin (seed 003): a message
is published with a *pattern* as its routing key and reaches every binding whose literal
key the pattern matches. Words are those of the topic exchange (:mod:`exchanges.trie`):
``""`` is zero words, empty words are real words, ``*`` matches exactly one word (an empty
one too), ``#`` matches zero or more words, and wildcards count only as whole words. In a
binding key ``*`` and ``#`` are plain words.

Unlike the plugin, ``#`` followed by a wildcard works: ``#.*`` matches every key of at
least one word, ``#.#`` every key, ``#.*.c`` every key whose last word is ``c`` and that has
at least two words. The plugin compares the word after ``#`` with edge labels, so those
three match nothing there (research/peers.md section 4.5); that is a bug, not a contract.

Indexes. Binding keys are kept twice: in a forward trie, and in a trie of the reversed
words, so a suffix query (``#.d0``) is a prefix query there. Each node counts the bindings
below it. A query walks both tries up to the first ``#`` (a cheap, level-by-level walk:
before a ``#`` a node is reached at most once) and then searches from whichever frontier
has fewer bindings below it, so ``a0.#``, ``#.d0`` and ``a0.#.d0`` only visit the smaller
anchored subtree. The search after the first ``#`` visits each ``(node, pattern position)``
state once, so its cost is at most nodes x pattern length: never exponential, whatever the
number of ``#``. A pattern anchored at neither end (``#.c0.#``) has to visit the whole trie:
that is the one case no prefix index helps, and the route cache is what amortises it.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import Any, Generic, TypeVar

from exchanges.trie import HASH, STAR, split_words

D = TypeVar("D", bound=Hashable)


def normalise(words: Sequence[str]) -> list[str]:
    """Rewrite every run of wildcards as its ``*`` words followed by at most one ``#``.

    A run of wildcards only says "exactly k words" (no ``#``) or "at least k words" (some
    ``#``), where k counts the ``*``. So ``#.#`` is ``#``, ``#.*`` is ``*.#`` and ``#.*.#``
    is ``*.#``. With no two ``#`` adjacent, and ``*`` before ``#``, the walk up to the first
    ``#`` covers more of the pattern and the search has fewer ``#`` states to expand.
    """
    out: list[str] = []
    stars = 0
    hashed = False
    for word in words:
        if word == STAR:
            stars += 1
        elif word == HASH:
            hashed = True
        else:
            if stars or hashed:
                out.extend([STAR] * stars)
                if hashed:
                    out.append(HASH)
                stars, hashed = 0, False
            out.append(word)
    out.extend([STAR] * stars)
    if hashed:
        out.append(HASH)
    return out


class _Node(Generic[D]):
    """A trie node: children by word, destinations whose key ends here, bindings below.

    ``count`` is the number of binding references in this subtree (this node included): it
    picks the cheaper trie for a query, and a node whose count drops to 0 is pruned.
    """

    __slots__ = ("children", "count", "dests")

    def __init__(self) -> None:
        self.children: dict[str, _Node[D]] = {}
        self.dests: dict[D, int] = {}
        self.count = 0


class _KeyTrie(Generic[D]):
    """One direction of the index: a counted trie of literal word sequences."""

    __slots__ = ("root",)

    def __init__(self) -> None:
        self.root: _Node[D] = _Node()

    def add(self, words: Sequence[str], dest: D) -> None:
        node = self.root
        node.count += 1
        for word in words:
            child = node.children.get(word)
            if child is None:
                child = node.children[word] = _Node()
            node = child
            node.count += 1
        node.dests[dest] = node.dests.get(dest, 0) + 1

    def remove(self, words: Sequence[str], dest: D) -> bool:
        path = [self.root]
        for word in words:
            child = path[-1].children.get(word)
            if child is None:
                return False
            path.append(child)
        leaf = path[-1]
        count = leaf.dests.get(dest)
        if count is None:
            return False
        if count > 1:
            leaf.dests[dest] = count - 1
        else:
            del leaf.dests[dest]
        for node in path:
            node.count -= 1
        # Prune the nodes left with no binding below them (remove_path_if_empty).
        for parent, word, child in zip(path, words, path[1:], strict=False):
            if not child.count:
                del parent.children[word]
                break
        return True


class ReverseTopicTrie(Generic[D]):
    """Literal binding keys to destinations, matched by wildcard patterns.

    ``add`` and ``remove`` are the only mutators; both keep the forward and the reversed
    trie in step, and removal prunes empty nodes in both, so churn does not leak.
    """

    __slots__ = ("_backward", "_forward")

    def __init__(self) -> None:
        self._forward: _KeyTrie[D] = _KeyTrie()
        self._backward: _KeyTrie[D] = _KeyTrie()

    def __len__(self) -> int:
        """Number of bindings held (counting each (key, destination) reference)."""
        return self._forward.root.count

    def add(self, binding_key: str, dest: D) -> None:
        """Add one binding reference from the literal ``binding_key`` to ``dest``."""
        words = split_words(binding_key)
        self._forward.add(words, dest)
        self._backward.add(words[::-1], dest)

    def remove(self, binding_key: str, dest: D) -> bool:
        """Drop one binding reference; return False (and change nothing) if there is none."""
        words = split_words(binding_key)
        if not self._forward.remove(words, dest):
            return False
        self._backward.remove(words[::-1], dest)
        return True

    def match(self, pattern: str) -> set[D]:
        """Destinations of every binding key that the routing pattern ``pattern`` matches."""
        words = normalise(split_words(pattern))
        out: set[D] = set()
        if STAR not in words and HASH not in words:
            # A literal key: one descent (the only case where the pattern is a binding key).
            node = self._forward.root
            for word in words:
                child = node.children.get(word)
                if child is None:
                    return out
                node = child
            out.update(node.dests)
            return out
        backwards = words[::-1]
        # Start with the direction that has the longer literal anchor: it is usually the
        # cheaper, and it caps the work spent on trying the other.
        first, second = (self._forward, words), (self._backward, backwards)
        if _anchor(backwards) > _anchor(words):
            first, second = second, first
        best = _frontier(first[0].root, first[1], None)
        if best is None or not best[1]:
            return out  # no binding has the anchor: nothing can match
        other = _frontier(second[0].root, second[1], best[0])
        if other is not None:
            if not other[1]:
                return out
            if other[0] < best[0]:
                best, first = other, second
        _, nodes, start = best
        _search(nodes, start, first[1], out)
        return out

    def node_count(self) -> int:
        """Nodes of both tries, roots included (2 when empty): a leak check for tests."""
        count = 0
        todo = [self._forward.root, self._backward.root]
        while todo:
            node = todo.pop()
            count += 1
            todo.extend(node.children.values())
        return count

    def dump(self) -> Any:
        """A canonical, comparable form of both tries (nodes and counts included)."""
        return (_dump(self._forward.root), _dump(self._backward.root))


def _anchor(words: Sequence[str]) -> int:
    """Number of literal words before the first wildcard."""
    for i, word in enumerate(words):
        if word in (STAR, HASH):
            return i
    return len(words)


Frontier = tuple[int, list[_Node[Any]], int]


def _frontier(root: _Node[D], words: Sequence[str], limit: int | None) -> Frontier | None:
    """Walk ``words`` up to the first ``#``: (estimated cost, nodes reached, position).

    Before the first ``#`` each trie level holds at most one state per node, so plain lists
    do. The cost is the work done plus, if a ``#`` follows, the bindings under the nodes
    reached (what the search below them may visit). Returns an empty node list when nothing
    can match, and None when the work exceeds ``limit`` (the other direction is cheaper).
    """
    nodes = [root]
    work = 0
    i = 0
    n = len(words)
    while i < n:
        word = words[i]
        if word == HASH:
            return work + sum(node.count for node in nodes), nodes, i
        if word == STAR:
            nodes = [child for node in nodes for child in node.children.values()]
        else:
            nodes = [child for node in nodes if (child := node.children.get(word)) is not None]
        work += len(nodes) + 1
        i += 1
        if not nodes:
            return 0, nodes, i
        if limit is not None and work > limit:
            return None
    return work, nodes, i


def _search(nodes: list[_Node[D]], start: int, words: Sequence[str], out: set[D]) -> None:
    """Every destination below ``nodes`` that matches ``words[start:]`` (``words[start]`` is
    a ``#``, or ``start`` is the end).

    A depth-first search over ``(node, position)`` states. With one ``#`` no state can be
    reached twice (positions before it are tied to depths, and after it each state has one
    predecessor chain). With two or more, states repeat, so the ``#`` states are memoised:
    every other state hangs off a ``#`` state by a single chain, so this bounds the whole
    search by nodes x pattern length, as in :class:`exchanges.trie.TopicTrie`.
    """
    n = len(words)
    if start == n:
        for node in nodes:
            out.update(node.dests)
        return
    last = n - 1
    seen: set[tuple[_Node[D], int]] | None = set() if words.count(HASH) > 1 else None
    stack = [(node, start) for node in nodes]
    while stack:
        node, i = stack.pop()
        if i == n:
            if node.dests:
                out.update(node.dests)
            continue
        word = words[i]
        if word == HASH:
            if seen is not None:
                state = (node, i)
                if state in seen:
                    continue
                seen.add(state)
            elif i == last:
                _collect(node, out)  # a lone trailing '#': the whole subtree, no states
                continue
            if i == last:
                out.update(node.dests)
            else:
                stack.append((node, i + 1))  # '#' as zero words
            for child in node.children.values():
                stack.append((child, i))  # '#' eats one more word
        elif word == STAR:
            i += 1
            for child in node.children.values():
                stack.append((child, i))
        else:
            literal = node.children.get(word)
            if literal is not None:
                stack.append((literal, i + 1))


def _collect(node: _Node[D], out: set[D]) -> None:
    """Every destination in the subtree of ``node``."""
    todo = [node]
    while todo:
        node = todo.pop()
        if node.dests:
            out.update(node.dests)
        todo.extend(node.children.values())


def _dump(node: _Node[Any]) -> Any:
    dests = tuple(sorted(node.dests.items(), key=repr))
    children = tuple(sorted((word, _dump(child)) for word, child in node.children.items()))
    return (node.count, dests, children)
