"""The reverse topic exchange ``x-rtopic``: the plugin's examples, edge cases, the intended
semantics where the plugin differs, pruning, the cost bound, and routing through route()."""

from __future__ import annotations

import time

import pytest

from leveret.exchanges.model import (
    Binding,
    BindingAdded,
    BindingRemoved,
    DestKind,
    Exchange,
    ExchangeDeclared,
    ExchangeType,
    Queue,
    QueueDeclared,
)
from leveret.exchanges.patterns import RTopicIndex
from leveret.exchanges.projection import Projection
from leveret.exchanges.routing import route
from leveret.exchanges.rtopic import ReverseTopicTrie, normalise
from leveret.exchanges.types import TYPES, validate_binding
from leveret.exchanges.types.rtopic import RTOPIC as RTOPIC_TYPE

RTOPIC = ExchangeType.RTOPIC
X = "rtopic"

# The plugin README's setup (seed 003): queue -> literal binding key.
README_BINDINGS = {
    "A": "server1.app1.mod1.info",
    "B": "server1.app1.mod1.error",
    "C": "server1.app2.mod1.info",
    "D": "server2.app2.mod1.warning",
    "E": "server1.app1.mod2.info",
    "F": "server2.app1.mod1.info",
}

README_PUBLISHES = {
    "server1.app1.mod1.info": "A",
    "*.app1.mod1.info": "A F",
    "#.info": "A C E F",
    "#.mod1.info": "A C F",
    "#": "A B C D E F",
    "server1.app1.mod1.*": "A B",
    "server1.app1.#": "A B E",
}


@pytest.fixture
def projection() -> Projection:
    p = Projection()
    p.apply(ExchangeDeclared(Exchange(X, RTOPIC)))
    for queue, key in README_BINDINGS.items():
        p.apply(QueueDeclared(Queue(queue)))
        p.apply(BindingAdded(Binding(X, queue, DestKind.QUEUE, key)))
    return p


def test_type_name_is_the_plugins() -> None:
    assert ExchangeType("x-rtopic") is RTOPIC
    assert TYPES[RTOPIC] is RTOPIC_TYPE
    assert validate_binding(Exchange(X, RTOPIC), {"x-match": "bogus"}) is None


@pytest.mark.parametrize(("pattern", "expected"), README_PUBLISHES.items())
def test_plugin_readme_examples(projection: Projection, pattern: str, expected: str) -> None:
    assert route(projection, X, pattern) == set(expected.split())


# Where the plugin's collect_with_hash/4 compares the word after '#' with edge labels, these
# match nothing there (research/peers.md 4.5). Leveret gives the intended answers.
@pytest.mark.parametrize(
    ("pattern", "expected"),
    [
        ("#.*", "A B C D E F"),  # at least one word
        ("#.#", "A B C D E F"),
        ("#.*.info", "A C E F"),  # ends in info, at least two words
        ("#.*.*.*.*", "A B C D E F"),
        ("#.*.*.*.*.*", ""),  # at least five words: none has
        ("*.#", "A B C D E F"),  # the plugin gets this one right
        ("#.app1.#", "A B E F"),
        ("server1.#.info", "A C E"),
        ("#.mod1.*", "A B C D F"),
        ("*.*.mod2.*", "E"),
        ("server2.#.#.warning", "D"),
    ],
)
def test_intended_semantics_where_the_plugin_differs(
    projection: Projection, pattern: str, expected: str
) -> None:
    assert route(projection, X, pattern) == set(expected.split())


def trie_of(*binding_keys: str) -> ReverseTopicTrie[str]:
    trie: ReverseTopicTrie[str] = ReverseTopicTrie()
    for key in binding_keys:
        trie.add(key, key)
    return trie


@pytest.mark.parametrize(
    ("pattern", "binding_key", "matches"),
    [
        ("a.*.b", "a..b", True),  # '*' matches the empty word
        ("a.b", "a..b", False),
        ("a.#.b", "a..b", True),
        ("*.*", ".", True),  # '.' is two empty words
        ("*", ".", False),
        ("#", ".", True),
        ("", ".", False),
        ("a", "a.", False),  # 'a.' is [a, ""]
        ("a.*", "a.", True),
        ("a.#", "a", True),  # '#' matches zero words
        ("a.*", "a", False),
        ("*", "", False),  # '*' never matches the empty key
        ("#", "", True),
        ("#.#", "", True),
        ("", "", True),  # the empty pattern matches only the empty key
        ("", "a", False),
        ("*.#", "", False),
        ("#.*.#", "", False),
        ("a*", "ab", False),  # wildcards only as whole words
        ("a*", "a*", True),
        ("*", "*", True),  # in a binding key '*' and '#' are plain words...
        ("#", "#", True),
        ("a.*", "a.#", True),  # ...which wildcards in the pattern match like any word
        ("a.b", "a.*", False),  # and a literal pattern word does not
        ("#.z", "x.y.z", True),
        ("#.y", "x.y.z", False),
        ("#.y.#", "x.y.z", True),
        ("x.#.z", "x.z", True),
        ("x.*.#.z", "x.z", False),
    ],
)
def test_edge_cases(pattern: str, binding_key: str, matches: bool) -> None:
    assert trie_of(binding_key).match(pattern) == ({binding_key} if matches else set())


def test_normalise_rewrites_wildcard_runs() -> None:
    assert normalise([]) == []
    assert normalise(["#", "#"]) == ["#"]
    assert normalise(["#", "*"]) == ["*", "#"]
    assert normalise(["#", "*", "#", "a", "#", "#", "*", "", "*"]) == [
        "*",
        "#",
        "a",
        "*",
        "#",
        "",
        "*",
    ]


def test_prefix_suffix_and_mixed_use_either_trie() -> None:
    keys = [f"a{i % 7}.b{i % 5}.c{i % 3}.d{i % 11}" for i in range(400)]
    trie = trie_of(*keys)

    def brute(prefix: str = "", suffix: str = "") -> set[str]:
        return {k for k in keys if k.startswith(prefix) and k.endswith(suffix)}

    assert trie.match("a3.#") == brute("a3.")
    assert trie.match("#.d10") == brute(suffix=".d10")
    assert trie.match("a3.#.d10") == brute("a3.", ".d10")
    assert trie.match("a3.*.*.d10") == brute("a3.", ".d10")
    assert trie.match("*.*.*.d4") == brute(suffix=".d4")
    assert trie.match("#.c2.*") == {k for k in keys if k.split(".")[2] == "c2"}
    assert trie.match("a9.#") == set()  # missing anchors end the query early
    assert trie.match("#.d99") == set()
    assert trie.match("a3.#.d99") == set()


def test_removal_prunes_both_tries() -> None:
    keys = ["a.b.c", "a.b", "", "a..b", ".", "x.y.z.w", "*", "#.a", "a.b.c"]
    trie = trie_of(*keys)
    assert len(trie) == len(keys)
    assert trie.node_count() > 2
    assert not trie.remove("a.b.c.d", "a.b.c.d")
    assert not trie.remove("a.b", "other")
    for key in keys:
        assert trie.remove(key, key)
    assert len(trie) == 0
    assert trie.node_count() == 2  # the two roots
    assert trie.dump() == ReverseTopicTrie().dump()


def test_many_hashes_stay_polynomial() -> None:
    # Every key ends in 'z', so neither end anchors the search. Without (node, position)
    # memoisation every '#' multiplies the ways to split a key: C(20, 8) ~ 1.3e5 paths for
    # the hit, and the miss (21 'w0' asked, 20 at most) explores all of them and more.
    words = [f"w{i % 2}" for i in range(40)]
    keys = [".".join([*words[:n], "z"]) for n in range(41)]
    trie = trie_of(*keys)
    hit_pattern = ".".join(["#", "w0"] * 8 + ["#", "w1", "z"])
    miss_pattern = ".".join(["#", "w0"] * 21 + ["#", "z"])
    started = time.perf_counter()
    hit = trie.match(hit_pattern)
    miss = trie.match(miss_pattern)
    elapsed = time.perf_counter() - started
    assert hit == {k for k in keys if k.count("w0") >= 8 and k.endswith("w1.z")}
    assert miss == set()
    assert elapsed < 1.0


def test_route_with_e2e_alternate_exchange_and_cc() -> None:
    p = Projection()
    for event in (
        ExchangeDeclared(Exchange("r", RTOPIC, arguments={"alternate-exchange": "ae"})),
        ExchangeDeclared(Exchange("inner", RTOPIC)),
        ExchangeDeclared(Exchange("ae", ExchangeType.FANOUT)),
        *(QueueDeclared(Queue(q)) for q in ("q1", "q2", "q3", "lost")),
    ):
        p.apply(event)
    for binding in (
        Binding("r", "q1", DestKind.QUEUE, "a.b"),
        Binding("r", "inner", DestKind.EXCHANGE, "a.c"),
        Binding("inner", "q2", DestKind.QUEUE, "a.c"),
        Binding("inner", "q3", DestKind.QUEUE, "z"),
        Binding("ae", "lost", DestKind.QUEUE, ""),
    ):
        p.apply(BindingAdded(binding))
    assert route(p, "r", "a.*") == {"q1", "q2"}  # the pattern goes on through E2E
    assert route(p, "r", "a.b") == {"q1"}
    assert route(p, "r", "#.c") == {"q2"}
    assert route(p, "r", "nothing") == {"lost"}  # alternate exchange
    assert route(p, "r", "#.b", {"CC": ["a.c"]}) == {"q1", "q2"}
    # CC and BCC keys apply at every exchange of the route: 'z' is bound at 'inner' only.
    assert route(p, "r", "x", {"BCC": ["a.c", "z"]}) == {"q2", "q3"}
    p.apply(BindingRemoved(Binding("inner", "q2", DestKind.QUEUE, "a.c")))
    # 'inner' routed nothing; it has no AE, and r routed to an exchange: nothing, no AE.
    assert route(p, "r", "a.c") == set()
    index = p.indexes["r"].queues
    assert isinstance(index, RTopicIndex)
    assert index.lookup("a.*") == {"q1"}


@pytest.mark.parametrize(
    "pattern",
    ["#.b1.c2", "#.a0.#", "*.*.c2.#", "#.b1.*", "#.*.b1.*.#", "a0.#.c2", "*.b1.#.c2", "#.a0.b1.#"],
)
def test_infix_plans_on_a_larger_trie(pattern: str) -> None:
    """Enough bindings that anchored searches cost more than the word index: patterns
    anchored at neither end, or at an end with many bindings below, go the infix way (in
    the forward trie or, from the last literal word, in the reversed one)."""
    keys = [f"a{i % 5}.b{i % 7}.c{i % 11}" for i in range(300)]
    keys += [f"x{i}.a{i % 3}.b{i % 2}.c{i % 4}.y" for i in range(300)]
    trie = trie_of(*keys)
    words = tuple(pattern.split("."))
    expected = {k for k in keys if _matches(words, tuple(k.split(".")))}
    assert trie.match(pattern) == expected


def _matches(pattern: tuple[str, ...], key: tuple[str, ...]) -> bool:
    if not pattern:
        return not key
    head, rest = pattern[0], pattern[1:]
    if head == "#":
        return any(_matches(rest, key[i:]) for i in range(len(key) + 1))
    return bool(key) and head in ("*", key[0]) and _matches(rest, key[1:])
