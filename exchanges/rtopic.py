"""The reverse topic index: literal binding keys, wildcard routing keys (``x-rtopic``).

The exchange type comes from the ``rabbitmq-rtopic-exchange`` plugin (seed 003): a message
is published with a *pattern* as its routing key and reaches every binding whose literal
key the pattern matches. Words are those of the topic exchange (:mod:`leveret.exchanges.trie`):
``""`` is zero words, empty words are real words, ``*`` matches exactly one word (an empty
one too), ``#`` matches zero or more words, and wildcards count only as whole words. In a
binding key ``*`` and ``#`` are plain words.

Unlike the plugin, ``#`` followed by a wildcard works: ``#.*`` matches every key of at
least one word, ``#.#`` every key, ``#.*.c`` every key whose last word is ``c`` and that has
at least two words. The plugin compares the word after ``#`` with edge labels, so those
three match nothing there (research/peers.md section 4.5); that is a bug, not a contract.

Indexes. Binding keys are kept twice, in a forward trie and in a trie of the reversed
words, so a suffix query (``#.d0``) is a prefix query there. Each node counts the bindings
below it, and each trie maps ``(word, depth)`` to the nodes reached by that word at that
depth. A pattern is first normalised (``#.#`` is ``#``, ``#.*`` is ``*.#``), then one of
three plans runs, chosen by estimates that cost a few dict lookups:

* prefix: descend the forward trie along the literal words before the first wildcard and
  search below (``a0.#``, ``a0.*.c0``);
* suffix: the same in the reversed trie with the literal words after the last wildcard
  (``#.d0``, ``*.c0.d0``);
* infix: start from the nodes where the pattern's rarest literal word can sit (its depth is
  known up to the first ``#``), drop those whose next words or path above do not fit, and
  search below the rest (``#.c0.#``, ``*.*.c0.#``, ``#.c0.*``), which neither end anchors.
  A pattern word found where it could not sit at all ends the query at once.

The search visits each ``(node, pattern position)`` state at most once, so its cost is at
most nodes x pattern length: never exponential, whatever the number of ``#``. What no index
avoids is the output: ``a0.#`` over 100 bindings visits their 100 subtrees. Repeated
patterns are answered by the route cache in front of the index (:mod:`leveret.exchanges.patterns`).
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import Any, Generic, TypeVar

from leveret.exchanges.trie import HASH, STAR, split_words

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
    estimates what a search below the node costs, and a node whose count drops to 0 is
    pruned. ``path`` (forward trie only) is the words from the root to the node, for the
    infix plan. A tuple rather than a parent pointer: no reference cycles, so a dropped
    trie is freed by reference counting at once, not by a full garbage collection.
    """

    __slots__ = ("children", "count", "dests", "path")

    def __init__(self, path: tuple[str, ...]) -> None:
        self.children: dict[str, _Node[D]] = {}
        self.dests: dict[D, int] = {}
        self.count = 0
        self.path = path


class _KeyTrie(Generic[D]):
    """One direction of the index: a counted trie of literal word sequences.

    ``at`` maps ``(word, depth)`` to the nodes whose incoming edge is ``word`` at that
    depth (the root is depth 0): where a pattern word can sit. The infix plan starts there,
    and a pattern word found at no possible depth proves that nothing matches. ``uses``
    counts those nodes per word over all depths (an estimate in one lookup), and ``depth``
    is the deepest depth ever used (an upper bound for ``at``'s depths). Only the forward
    trie keeps node paths (``paths``): the reversed one is only entered at the pattern's
    last literal word, where the path above is wildcards alone and needs no check.
    """

    __slots__ = ("at", "depth", "paths", "root", "uses")

    def __init__(self, paths: bool) -> None:
        self.root: _Node[D] = _Node(())
        self.at: dict[tuple[str, int], set[_Node[D]]] = {}
        self.uses: dict[str, int] = {}
        self.depth = 0
        self.paths = paths

    def add(self, words: Sequence[str], dest: D) -> None:
        node = self.root
        node.count += 1
        for depth, word in enumerate(words, 1):
            child = node.children.get(word)
            if child is None:
                child = node.children[word] = _Node((*node.path, word) if self.paths else ())
                self.at.setdefault((word, depth), set()).add(child)
                self.uses[word] = self.uses.get(word, 0) + 1
            node = child
            node.count += 1
        node.dests[dest] = node.dests.get(dest, 0) + 1
        self.depth = max(self.depth, len(words))

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
        # Prune the first node left with no binding below it (remove_path_if_empty): the
        # rest of the path below it is all that its subtree holds, so it all goes.
        for depth in range(1, len(path)):
            if not path[depth].count:
                del path[depth - 1].children[words[depth - 1]]
                for dead_depth in range(depth, len(path)):
                    word = words[dead_depth - 1]
                    nodes = self.at[word, dead_depth]
                    nodes.discard(path[dead_depth])
                    if not nodes:
                        del self.at[word, dead_depth]
                    if self.uses[word] > 1:
                        self.uses[word] -= 1
                    else:
                        del self.uses[word]
                break
        return True


class ReverseTopicTrie(Generic[D]):
    """Literal binding keys to destinations, matched by wildcard patterns.

    ``add`` and ``remove`` are the only mutators; both keep the forward and the reversed
    trie in step, and removal prunes empty nodes in both, so churn does not leak.
    """

    __slots__ = ("_backward", "_forward")

    def __init__(self) -> None:
        self._forward: _KeyTrie[D] = _KeyTrie(paths=True)
        self._backward: _KeyTrie[D] = _KeyTrie(paths=False)

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
        """Destinations of every binding key that the routing pattern ``pattern`` matches.

        Three plans; the cheapest estimate wins. *Prefix*: descend the forward trie along
        the literal words before the first wildcard and search below. *Suffix*: the same
        with the literal words after the last wildcard, in the reversed trie. *Infix*: start
        from the nodes where one literal word of the pattern can sit. Every estimate costs a
        few dict lookups; none walks the trie.
        """
        words = normalise(split_words(pattern))
        out: set[D] = set()
        forward, backward = self._forward, self._backward
        prefix = _anchor(words)
        head = _descend(forward.root, words[:prefix])
        if head is None:
            return out  # no binding key starts this way
        if prefix == len(words):
            out.update(head.dests)  # a literal pattern: one descent
            return out
        backwards = words[::-1]
        suffix = _anchor(backwards)
        tail = _descend(backward.root, backwards[:suffix])
        if tail is None:
            return out  # no binding key ends this way
        # Searching below an anchor visits about the nodes of its subtree, a few per
        # binding; an infix candidate costs one check before most are dropped.
        anchored = min(head.count, tail.count) * _NODES_PER_BINDING
        if anchored > _SMALL:
            infix = _cheapest_infix(forward, words, last=len(words))
            # In the reversed trie only the pattern's last literal word: what follows it in
            # the pattern is wildcards alone, so its nodes need no path check.
            lead = next((i for i, w in enumerate(backwards) if w not in (STAR, HASH)), 0)
            back = _cheapest_infix(backward, backwards, last=lead + 1)
            if infix is None or back is None:
                return out  # a literal word that no binding key has where it could sit
            (cost, j), (back_cost, back_j) = infix, back
            if j >= 0 and min(cost, back_cost) * _INFIX_FACTOR < anchored:
                if back_cost < cost:
                    _infix(backward, back_j, backwards, out)
                else:
                    _infix(forward, j, words, out)
                return out
        if head.count <= tail.count:
            _search([head], prefix, words, out, words.count(HASH) > 1)
        else:
            _search([tail], suffix, backwards, out, words.count(HASH) > 1)
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
        """A canonical, comparable form of both tries and the word index."""
        return (
            _dump(self._forward.root),
            _dump(self._backward.root),
            *(
                (
                    tuple(sorted((key, len(nodes)) for key, nodes in trie.at.items())),
                    tuple(sorted(trie.uses.items())),
                )
                for trie in (self._forward, self._backward)
            ),
        )


# Plan costs, in node visits: a search below an anchor visits a few nodes per binding below
# it (keys are a few words long), an infix candidate about one. Tests force a plan by
# setting _INFIX_FACTOR to 0 and _SMALL to -1 (infix whenever the pattern has a literal
# word), or _INFIX_FACTOR to 10**9 (never).
_NODES_PER_BINDING = 3
_INFIX_FACTOR = 1
_SMALL = 48  # below this an anchored search is cheaper than estimating the infix plan


def _anchor(words: Sequence[str]) -> int:
    """Number of literal words before the first wildcard."""
    for i, word in enumerate(words):
        if word in (STAR, HASH):
            return i
    return len(words)


def _descend(node: _Node[D], words: Sequence[str]) -> _Node[D] | None:
    """The node at the end of the literal ``words`` below ``node``, or None."""
    for word in words:
        child = node.children.get(word)
        if child is None:
            return None
        node = child
    return node


def _cheapest_infix(trie: _KeyTrie[D], words: Sequence[str], last: int) -> tuple[int, int] | None:
    """(estimated candidates, position) of the literal word among ``words[:last]`` that can
    sit at the fewest nodes; None when some literal word can sit nowhere, position -1 when
    there is no literal word. One dict lookup per word.

    Before the first ``#`` a word's depth is fixed (its position); after it the estimate is
    the word's nodes at every depth.
    """
    at = trie.at
    best = (1 << 62, -1)
    fixed = True
    depth = 0
    for j, word in enumerate(words[:last]):
        if word == HASH:
            fixed = False
            continue
        depth += 1
        if word == STAR:
            continue
        if fixed:
            found = at.get((word, depth))
            total = len(found) if found is not None else 0
        else:
            total = trie.uses.get(word, 0)
        if not total:
            return None
        if total < best[0]:
            best = (total, j)
    return best


def _infix(trie: _KeyTrie[D], j: int, words: Sequence[str], out: set[D]) -> None:
    """The infix plan: ``words[j]`` is a literal; take the nodes where it can sit (its
    depth is fixed unless a ``#`` comes before it, and at least the number of other words
    before it). For each, follow the literal words right after it (a dict lookup or two
    drops most candidates), check the path above against ``words[:j]``, then search below.

    This is what makes ``#.c0.#``, ``*.*.c0.#`` or ``#.b0.c0.*`` cheap, which neither end
    of the pattern anchors.
    """
    at = trie.at
    head = words[:j]
    word = words[j]
    floor = j + 1 - head.count(HASH)  # the least depth words[j] can sit at
    depths = range(floor, trie.depth + 1) if HASH in head else range(floor, floor + 1)
    stop = _anchor(words[j + 1 :]) + j + 1  # the end of the literal run that follows
    run = words[j + 1 : stop]
    # The candidates are at depths the head allows, so a head of wildcards alone matches
    # whatever path leads there, and no path needs reading.
    free = all(w in (STAR, HASH) for w in head)
    assert free or trie.paths
    seeds: list[_Node[D]] = []
    for depth in depths:
        for node in at.get((word, depth), ()):
            end: _Node[D] | None = _descend(node, run) if run else node
            if end is None:
                continue
            if not free and not _glob(head, node.path[:-1]):
                continue
            seeds.append(end)
    # Seeds at one depth have disjoint subtrees; after a '#' in the head they may nest, and
    # a '#' below then reaches the same states from several seeds: memoise then.
    hashes = sum(1 for w in words[stop:] if w == HASH)
    nested = HASH in head and len(seeds) > 1
    _search(seeds, stop, words, out, hashes > 1 or (hashes > 0 and nested))


def _glob(pattern: Sequence[str], words: Sequence[str]) -> bool:
    """Whether ``pattern`` (normalised) matches the literal ``words``.

    The classic two-pointer wildcard match (``#`` as any run, ``*`` as any one word):
    on a mismatch, retry from the last ``#`` with it eating one more word. Linear in
    practice, O(len(pattern) x len(words)) at worst.
    """
    p = w = 0
    star_p = -1
    star_w = 0
    np, nw = len(pattern), len(words)
    while w < nw:
        if p < np and pattern[p] == HASH:
            star_p, star_w = p, w
            p += 1
        elif p < np and (pattern[p] == STAR or pattern[p] == words[w]):
            p += 1
            w += 1
        elif star_p >= 0:
            star_w += 1
            p, w = star_p + 1, star_w
        else:
            return False
    while p < np and pattern[p] == HASH:
        p += 1
    return p == np


def _search(
    nodes: list[_Node[D]], start: int, words: Sequence[str], out: set[D], memo: bool
) -> None:
    """Every destination below ``nodes`` that matches ``words[start:]``.

    A depth-first search over ``(node, position)`` states. With one ``#`` and seeds whose
    subtrees are disjoint no state can be reached twice (positions before the ``#`` are
    tied to depths, and after it each state has one predecessor chain). Otherwise (``memo``)
    states repeat, so the ``#`` states are memoised: every other state hangs off a ``#``
    state by a single chain, so this bounds the whole search by nodes x pattern length, as
    in :class:`leveret.exchanges.trie.TopicTrie`.
    """
    n = len(words)
    last = n - 1
    seen: set[tuple[_Node[D], int]] | None = set() if memo else None
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
    pop, extend, update = todo.pop, todo.extend, out.update
    while todo:
        node = pop()
        if node.dests:
            update(node.dests)
        if node.children:
            extend(node.children.values())


def _dump(node: _Node[Any]) -> Any:
    dests = tuple(sorted(node.dests.items(), key=repr))
    children = tuple(sorted((word, _dump(child)) for word, child in node.children.items()))
    return (node.count, dests, children)
