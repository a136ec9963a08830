"""The topic trie: one per topic exchange, the projection that topic routing reads.

Semantics are RabbitMQ's (``rabbit_db_topic_exchange.erl``, golden table in
``routing_SUITE.erl:topic1``):

* a key is split on every ``.``; ``""`` is zero words, and empty words are real words
  (``a..b`` is ``[a, "", b]``);
* ``*`` matches exactly one word, including an empty one, so it never matches ``""``;
* ``#`` matches zero or more words;
* wildcards are only recognised as whole words (``a*`` is a literal word).

At each node the walk follows the literal word, ``*``, and ``#`` (for every remaining
suffix), as RabbitMQ does. States can only repeat once a path has taken two
``#`` edges (RabbitMQ PR #17039), and every such repeat goes through a ``#`` expansion, so
memoising the ``(hash node, position)`` pairs pushed there is enough to keep bindings like
``#.#.#.#.#.z`` polynomial instead of exponential.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any, Generic, TypeVar

D = TypeVar("D", bound=Hashable)

HASH = "#"
STAR = "*"


def split_words(key: str) -> list[str]:
    """Split a routing or binding key into words; ``""`` is zero words, not one empty word."""
    return key.split(".") if key else []


class _Node(Generic[D]):
    """A trie node: children by word, and the destinations whose binding key ends here.

    ``dests`` counts bindings per destination, because two bindings may share a key and a
    destination (they differ by arguments), and the destination stays routable until the
    last of them goes.
    """

    __slots__ = ("children", "dests")

    def __init__(self) -> None:
        self.children: dict[str, _Node[D]] = {}
        self.dests: dict[D, int] = {}


class TopicTrie(Generic[D]):
    """A refcounted trie of topic binding keys to destinations.

    ``add`` and ``remove`` are the only mutators. Removing the last binding below a node
    prunes the node and its empty ancestors, so binding churn does not leak memory.
    """

    __slots__ = ("_root", "_size")

    def __init__(self) -> None:
        self._root: _Node[D] = _Node()
        self._size = 0

    def __len__(self) -> int:
        """Number of bindings held (counting each (key, destination) reference)."""
        return self._size

    def add(self, binding_key: str, dest: D) -> None:
        """Add one binding reference from ``binding_key`` to ``dest``."""
        node = self._root
        for word in split_words(binding_key):
            child = node.children.get(word)
            if child is None:
                child = node.children[word] = _Node()
            node = child
        node.dests[dest] = node.dests.get(dest, 0) + 1
        self._size += 1

    def remove(self, binding_key: str, dest: D) -> bool:
        """Drop one binding reference; return False (and change nothing) if there is none."""
        node = self._root
        path: list[tuple[_Node[D], str, _Node[D]]] = []
        for word in split_words(binding_key):
            child = node.children.get(word)
            if child is None:
                return False
            path.append((node, word, child))
            node = child
        count = node.dests.get(dest)
        if count is None:
            return False
        if count > 1:
            node.dests[dest] = count - 1
        else:
            del node.dests[dest]
        self._size -= 1
        # Prune back towards the root while nodes are empty (RabbitMQ's remove_path_if_empty).
        for parent, word, child in reversed(path):
            if child.children or child.dests:
                break
            del parent.children[word]
        return True

    def match(self, routing_key: str) -> set[D]:
        """Destinations of every binding key that matches ``routing_key``."""
        words = split_words(routing_key)
        n = len(words)
        out: set[D] = set()
        stack: list[tuple[_Node[D], int]] = [(self._root, 0)]
        seen: set[tuple[_Node[D], int]] | None = None
        while stack:
            node, i = stack.pop()
            children = node.children
            if children:
                hash_node = children.get(HASH)
                if hash_node is not None:
                    if not hash_node.children:
                        # A trailing '#' matches any remaining suffix: no need to expand it.
                        out.update(hash_node.dests)
                    else:
                        if seen is None:
                            seen = set()
                        for j in range(i, n + 1):
                            state = (hash_node, j)
                            if state not in seen:
                                seen.add(state)
                                stack.append(state)
                if i < n:
                    word = words[i]
                    star = children.get(STAR)
                    if star is not None:
                        stack.append((star, i + 1))
                    literal = children.get(word)
                    # A routing-key word spelled '*' or '#' would find the wildcard node
                    # again; it is already covered above, so skip the duplicate state.
                    if literal is not None and literal is not star and literal is not hash_node:
                        stack.append((literal, i + 1))
            if i == n and node.dests:
                out.update(node.dests)
        return out

    def node_count(self) -> int:
        """Number of nodes, root included (1 when empty): a leak check for tests."""
        count = 0
        todo = [self._root]
        while todo:
            node = todo.pop()
            count += 1
            todo.extend(node.children.values())
        return count

    def dump(self) -> Any:
        """A canonical, comparable form of the whole structure (nodes included)."""
        return _dump(self._root)


def _dump(node: _Node[Any]) -> Any:
    dests = tuple(sorted(node.dests.items(), key=repr))
    children = tuple(sorted((word, _dump(child)) for word, child in node.children.items()))
    return (dests, children)
