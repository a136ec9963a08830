"""The layer rules of DESIGN.md, enforced on the source (an AST check, no imports run).

    broker -> storage -> exchanges,  broker -> exchanges,  pipeline -> exchanges

``exchanges/`` is the pure domain: standard library only, and none of it that does I/O or
concurrency. ``storage/`` is sync file I/O under the broker: no asyncio, no wire codec, and
it never reaches up into ``broker``.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

FORBIDDEN: dict[str, set[str]] = {
    "exchanges": {
        "asyncio",
        "socket",
        "os",
        "pamqp",
        "broker",
        "storage",
        "pipeline",
        "uvloop",
        "selectors",
        "select",
        "ssl",
        "subprocess",
        "threading",
        "multiprocessing",
        "io",
        "pathlib",
        "shutil",
        "tempfile",
    },
    "storage": {"broker", "pamqp", "asyncio", "uvloop", "pipeline"},
    "pipeline": {"broker", "storage", "pamqp", "asyncio", "uvloop"},
}

# pipeline -> exchanges only, plus Spark (and py4j under it), matplotlib for the charts and
# pyarrow for the trace's segments and the tables derived on the driver.
PIPELINE_ALLOWED = {
    "__future__",
    "leveret",
    "pipeline",
    "exchanges",
    "pyspark",
    "py4j",
    "matplotlib",
    "pyarrow",
}


# Installed, the folders are one namespace (pyproject's package-dir): ``broker/`` is ``leveret``
# itself, the others its subpackages. The rules speak of folders, so names map back to them.
FOLDERS = {"exchanges", "storage", "pipeline"}


def layer(module: str) -> str:
    """The repository folder (or third-party top-level name) that ``module`` lives in."""
    parts = module.split(".")
    if parts[0] != "leveret" or len(parts) == 1:
        return parts[0]  # ``leveret`` alone: the namespace's door, a version string
    return parts[1] if len(parts) > 1 and parts[1] in FOLDERS else "broker"


def imported_modules(path: Path, package: str) -> set[str]:
    """Layers of every module that ``path`` imports (see :func:`layer`), relative imports
    resolved."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(layer(alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: stays inside the package
                found.add(package)
            elif node.module == "leveret":  # ``from leveret import cli``: the names are modules
                found.update(layer(f"leveret.{alias.name}") for alias in node.names)
            elif node.module:
                found.add(layer(node.module))
        elif (
            isinstance(node, ast.Call)
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
            and (
                (isinstance(node.func, ast.Name) and node.func.id == "__import__")
                or (isinstance(node.func, ast.Attribute) and node.func.attr == "import_module")
            )
        ):
            found.add(layer(node.args[0].value))
    return found


def sources(package: str) -> list[Path]:
    return sorted((ROOT / package).rglob("*.py"))


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_forbidden_imports(package: str) -> None:
    assert (ROOT / package).is_dir(), f"{package}/ is missing"
    offences = [
        f"{path.relative_to(ROOT)} imports {name}"
        for path in sources(package)
        for name in sorted(imported_modules(path, package) & FORBIDDEN[package])
    ]
    assert offences == []


def test_exchanges_uses_only_the_standard_library() -> None:
    allowed = set(sys.stdlib_module_names) | {"__future__", "exchanges"}
    offences = [
        f"{path.relative_to(ROOT)} imports {name}"
        for path in sources("exchanges")
        for name in sorted(imported_modules(path, "exchanges") - allowed)
    ]
    assert offences == []


def test_pipeline_imports_only_spark_matplotlib_and_exchanges() -> None:
    allowed = set(sys.stdlib_module_names) | PIPELINE_ALLOWED
    offences = [
        f"{path.relative_to(ROOT)} imports {name}"
        for path in sources("pipeline")
        for name in sorted(imported_modules(path, "pipeline") - allowed)
    ]
    assert offences == []


def test_the_checker_sees_every_import_form(tmp_path: Path) -> None:
    probe = tmp_path / "probe.py"
    probe.write_text(
        "import os.path\nfrom pamqp import frame\nfrom . import sibling\n"
        "import importlib\nimportlib.import_module('asyncio.tasks')\n__import__('socket')\n"
    )
    assert imported_modules(probe, "exchanges") == {
        "os",
        "pamqp",
        "exchanges",
        "importlib",
        "asyncio",
        "socket",
    }


def test_the_checker_maps_the_namespace_to_folders(tmp_path: Path) -> None:
    probe = tmp_path / "probe.py"
    probe.write_text(
        "import leveret.exchanges.routing\nfrom leveret.storage import log\n"
        "from leveret import cli, exchanges\nimport leveret\n"
    )
    assert imported_modules(probe, "pipeline") == {"exchanges", "storage", "broker", "leveret"}


@pytest.mark.parametrize("folder", ["broker", "exchanges", "storage", "pipeline", "tests", "bench"])
def test_nothing_imports_the_folders_by_their_own_names(folder: str) -> None:
    """Installed, only ``leveret`` exists: ``import broker`` works in a checkout and nowhere
    else, so every import goes through the namespace."""
    offences = [
        f"{path.relative_to(ROOT)} imports {name}"
        for path in sorted((ROOT / folder).rglob("*.py"))
        for name in _raw_top_names(path)
        if name in {"broker", "exchanges", "storage", "pipeline"}
    ]
    assert offences == []


def _raw_top_names(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module.split(".")[0])
    return names


def test_exchange_type_modules_import_neither_the_projection_nor_routing() -> None:
    """exchanges/types/ is below the projection and routing, which use it (its door says
    so): a type module reads the data structures of exchanges/, never what is built on it."""
    above = {
        "leveret.exchanges.projection",
        "leveret.exchanges.routing",
        "leveret.exchanges.policies",
    }
    offences = []
    for path in sorted((ROOT / "exchanges" / "types").rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module in above:
                offences.append(f"{path.relative_to(ROOT)} imports {node.module}")
            elif isinstance(node, ast.Import):
                offences += [
                    f"{path.relative_to(ROOT)} imports {alias.name}"
                    for alias in node.names
                    if alias.name in above
                ]
    assert offences == []


# -- inside broker/: one package per layer, imports only down (issue 33) -------------------

# The wire and everything above it: what the session and the node never import.
WIRE = (
    "leveret.wire",
    "leveret.server",
    "leveret.cli",
    "leveret.management",
    "leveret.control",
    "leveret.testing",
    "leveret.inspect",
    "leveret.faults",
)

# What each package of broker/ may import of leveret (beside itself), as its door says.
# ``leveret`` alone is the namespace's door (its __version__, and which build runs).
DOOR = ("leveret.__version__", "leveret.build_kind")
BELOW_NODE = ("leveret.config", "leveret.exchanges", "leveret.storage")
ALLOWED = {
    "node": ("leveret.node", "leveret.trace", *BELOW_NODE),
    # The traffic trace's recorder is one of the node's event subscribers: it sits beside
    # the node (the module circle test below still holds between their modules).
    "trace": ("leveret.trace", "leveret.node", *BELOW_NODE),
    "session": ("leveret.session", "leveret.node", *BELOW_NODE),
    "wire": ("leveret.wire", "leveret.session", "leveret.node", "leveret.trace", *BELOW_NODE),
    "management": (
        "leveret.management",
        "leveret.faults",
        "leveret.wire",
        "leveret.session",
        "leveret.node",
        "leveret.trace",
        *BELOW_NODE,
    ),
    "control": (
        "leveret.control",
        "leveret.faults",
        "leveret.management",
        "leveret.wire",
        "leveret.session",
        "leveret.node",
        "leveret.trace",
        *BELOW_NODE,
    ),
}


@pytest.mark.parametrize("package", sorted(ALLOWED))
def test_each_package_imports_only_what_its_door_allows(package: str) -> None:
    """Between packages imports go down only (counting type-only and late imports)."""
    allowed = ALLOWED[package]
    offences = sorted(
        f"{path.relative_to(ROOT)} imports {name}"
        for path in sources(f"broker/{package}")
        for name, _guarded in imports_with_guard(path)
        if name.startswith("leveret.")
        and name not in DOOR  # the namespace's door
        and not _within(name, allowed)
    )
    assert sources(f"broker/{package}")
    assert offences == []


def test_every_package_states_its_rule_at_the_door() -> None:
    """Each package's __init__ says what it may import and what imports it."""
    for package in (*ALLOWED, "inspect"):
        door = (ROOT / "broker" / package / "__init__.py").read_text(encoding="utf-8")
        assert "Rule at the door" in door, package


def test_the_root_holds_only_the_entry_points() -> None:
    """broker/ itself: the CLI, the server's assembly, the settings, the pytest plugin and
    the injected faults' API; everything else lives in a package named after its layer."""
    modules = {path.stem for path in (ROOT / "broker").glob("*.py")}
    assert modules == {
        "__init__",
        "__main__",
        "cli",
        "config",
        "faults",
        "server",
        "settings",
        "settings_types",
        "testing",
    }


def imports_with_guard(path: Path) -> list[tuple[str, bool]]:
    """Every module ``path`` imports, by its full name (``from leveret import x`` names
    ``leveret.x``), and whether the import sits under ``if TYPE_CHECKING:``."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    guarded: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            guarded.update(id(inner) for child in node.body for inner in ast.walk(child))
    found: list[tuple[str, bool]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(alias.name, id(node) in guarded) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            if node.module == "leveret":
                found += [(f"leveret.{a.name}", id(node) in guarded) for a in node.names]
            else:
                found.append((node.module, id(node) in guarded))
    return found


def _within(name: str, modules: tuple[str, ...]) -> bool:
    return any(name == module or name.startswith(module + ".") for module in modules)


def test_the_session_imports_neither_asyncio_nor_pamqp_nor_the_wire() -> None:
    """broker/session/ (its door says so) decides what rabbit_channel decides from plain
    calls: no event loop, no frames, and no wire module, not even for a type name."""
    forbidden = ("asyncio", "uvloop", "pamqp", "socket", "ssl", "selectors", *WIRE)
    offences = [
        f"{path.relative_to(ROOT)} imports {name}"
        for path in sources("broker/session")
        for name, _guarded in imports_with_guard(path)
        if _within(name, forbidden)
    ]
    assert sources("broker/session")
    assert offences == []


def test_the_node_imports_neither_the_session_nor_the_wire() -> None:
    """A queue or a vhost never reaches up, not even for a type name: a consumer holds a
    Subscriber, not a channel, an exclusive queue a connection as its Owner; the shared
    state (node/state.py) holds the connections as Peers, and hands the alarms to them."""
    offences = [
        f"{path.relative_to(ROOT)} imports {name}"
        for path in sources("broker/node")
        for name, _guarded in imports_with_guard(path)
        if _within(name, ("leveret.session", *WIRE))
    ]
    assert sources("broker/node")
    assert offences == []


@pytest.mark.parametrize("folder", ["management", "control"])
def test_management_and_control_take_the_shared_state_not_the_server(folder: str) -> None:
    """The server starts their listeners and hands them its ServerState: they never import
    leveret.server (which imports them)."""
    offences = [
        f"{path.relative_to(ROOT)} imports {name}"
        for path in sources(f"broker/{folder}")
        for name, _guarded in imports_with_guard(path)
        if _within(name, ("leveret.server",))
    ]
    assert offences == []


def test_the_guard_reader_tells_type_only_imports(tmp_path: Path) -> None:
    probe = tmp_path / "probe.py"
    probe.write_text(
        "from typing import TYPE_CHECKING\nfrom leveret.wire import codec\n"
        "if TYPE_CHECKING:\n    from leveret.wire.connection import Connection\n"
    )
    assert imports_with_guard(probe) == [
        ("typing", False),
        ("leveret.wire", False),
        ("leveret.wire.connection", True),
    ]


# -- no import circle inside broker/ (issue 23) -----------------------------------------------

# None is left: a class whose methods are split into modules (the queue, the connection,
# the channel) imports them, and each of them sees the class through a protocol of its own.


def module_names(folder: Path, top: str = "leveret") -> dict[str, Path]:
    """Every module under ``folder`` by its installed name (``folder`` is ``top``, a
    package's ``__init__.py`` is the package)."""
    found: dict[str, Path] = {}
    for path in sorted(folder.rglob("*.py")):
        parts = list(path.relative_to(folder).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join([top, *parts])] = path
    return found


def import_graph(
    folder: Path, top: str = "leveret", type_only_within: tuple[str, ...] = ()
) -> dict[str, set[str]]:
    """Which modules of ``folder`` each module of it imports, by any statement: under
    ``if TYPE_CHECKING:`` and inside functions included, relative imports resolved.
    ``from package import name`` names the package, and ``package.name`` too when that is a
    module; a name that is not a module counts for the module that holds it. A type-only
    import (under ``if TYPE_CHECKING:``) between two modules of one of the packages
    ``type_only_within`` is left out: collaborators inside one layer may name each other's
    types."""
    modules = module_names(folder, top)
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        guarded: set[int] = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
                guarded.update(id(inner) for child in node.body for inner in ast.walk(child))
        home = next((p for p in type_only_within if _within(name, (p,))), None)
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                named = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")[: len(package.split(".")) - node.level + 1]
                    source = ".".join([*base, *([node.module] if node.module else [])])
                else:
                    source = node.module or ""
                named = [source, *(f"{source}.{alias.name}" for alias in node.names)]
            else:
                continue
            for target in named:
                while target and target not in modules and "." in target:
                    target = target.rpartition(".")[0]  # a name inside a module
                if target not in modules or target == name:
                    continue
                if home is not None and id(node) in guarded and _within(target, (home,)):
                    continue  # a type named between collaborators of one layer
                graph[name].add(target)
    return graph


def circles(graph: dict[str, set[str]]) -> list[frozenset[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm,
    iterative): each is a set of modules that import each other, round some circle."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[frozenset[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(frozenset(component))
    return found


def parent_and_child(component: frozenset[str]) -> bool:
    """A package and one of its own modules (``leveret.inspect`` and
    ``leveret.inspect.brokerthread``): the one circle a package's door may close."""
    if len(component) != 2:
        return False
    first, second = sorted(component, key=len)
    return second.rpartition(".")[0] == first


# The layer packages inside which classes may name each other's types (a queue its vhost,
# the vhost its queues) instead of seeing each other through protocols of their own.
LAYERS = ("leveret.node", "leveret.wire", "leveret.session", "leveret.inspect")


def circle_offences(folder: Path, type_only_within: tuple[str, ...] = ()) -> list[str]:
    """The import circles of ``folder`` other than a package and its own child."""
    return [
        " <-> ".join(sorted(component))
        for component in circles(import_graph(folder, type_only_within=type_only_within))
        if not parent_and_child(component)
    ]


def test_no_import_circle_inside_broker() -> None:
    """No strongly connected component of broker/'s imports is larger than a package and
    its own child, counting late imports and every type-only import but those between
    modules of one layer package (issue 33: collaborators name each other's types)."""
    assert circle_offences(ROOT / "broker", LAYERS) == []


def test_the_circle_checker_finds_circles(tmp_path: Path) -> None:
    package = tmp_path / "broker"
    (package / "inner").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "inner" / "__init__.py").write_text("from leveret.inner import door\n")
    # A parent/child pair: allowed.
    (package / "inner" / "door.py").write_text("from leveret import inner\n")
    # Siblings: one imports the other for a type only, the other late, in a function.
    (package / "low.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .high import High\n"
    )
    (package / "high.py").write_text("def f():\n    from leveret.low import x\n")
    # Three modules round a circle, one through a relative import of its package.
    (package / "inner" / "a.py").write_text("from . import b\n")
    (package / "inner" / "b.py").write_text("import leveret.c\n")
    (package / "c.py").write_text("from leveret.inner.a import thing\n")
    graph = import_graph(package)
    assert graph["leveret.low"] == {"leveret.high"}
    assert graph["leveret.inner.a"] == {"leveret.inner", "leveret.inner.b"}
    assert sorted(sorted(c) for c in circles(graph)) == [
        ["leveret.c", "leveret.inner.a", "leveret.inner.b"],
        ["leveret.high", "leveret.low"],
        ["leveret.inner", "leveret.inner.door"],
    ]
    assert circle_offences(package) == [
        "leveret.c <-> leveret.inner.a <-> leveret.inner.b",
        "leveret.high <-> leveret.low",
    ]


# Rules of the session that exist once: where each is decided, and the calls or texts that
# would mean another place decides it again (issue 23: the management API had repeated the
# channel's permission checks and exclusive-queue locking).
SESSION_RULES = {
    "check_linked_exchange(": "a new object's alternate or dead-letter exchange permission",
    "check_exclusive(": "exclusive-queue locking (405)",
    "check_not_default(": "the default exchange's 403",
    "reserved prefix": "reserved amq.* names (403)",
    "in exclusive use": "exclusive consumers (403)",
    "attempt to reuse consumer tag": "consumer tag reuse (530)",
    "is not transactional": "tx.commit/rollback outside a transaction (406)",
    "cannot switch from": "tx and confirm modes (406)",
    "prefetch_size!=0": "basic.qos with a prefetch size (540)",
}


@pytest.mark.parametrize("needle", sorted(SESSION_RULES))
def test_session_rules_are_decided_only_in_the_session(needle: str) -> None:
    """Outside broker/session/, the wire channel and the management API call the session
    for these rules; none of them words or calls one itself."""
    offences = [
        str(path.relative_to(ROOT))
        for path in sources("broker")
        if "session" not in path.relative_to(ROOT).parts
        and path.name != "auth.py"  # where check_linked_exchange is defined
        and needle in path.read_text(encoding="utf-8")
    ]
    assert offences == [], SESSION_RULES[needle]


def borrowed_methods(path: Path) -> list[str]:
    """``Class.name = module.function`` lines in ``path``: a function of another module
    assigned as a method in a class body."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    modules = {
        alias.asname or alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module in ("leveret", "leveret.storage")
        for alias in node.names
    } | {
        (alias.asname or alias.name).split(".")[0]
        for node in ast.walk(tree)
        if isinstance(node, ast.Import)
        for alias in node.names
    }
    # Functions imported by name (lower case, as functions are named here).
    functions = {
        alias.asname or alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom)
        and (node.module or "").startswith("leveret")
        and node.module not in ("leveret", "leveret.storage")
        for alias in node.names
        if (alias.asname or alias.name).lstrip("_")[:1].islower()
    }
    found = []
    for cls in ast.walk(tree):
        if not isinstance(cls, ast.ClassDef):
            continue
        for stmt in cls.body:
            if not isinstance(stmt, ast.Assign):
                continue
            value = stmt.value
            if (
                isinstance(value, ast.Attribute)
                and isinstance(value.value, ast.Name)
                and value.value.id in modules
            ) or (isinstance(value, ast.Name) and value.id in functions):
                found.append(f"{cls.name}.{ast.unparse(stmt.targets[0])}")
    return found


# One class, one file (ARCHITECTURE.md): every method of a class is where the class is; a
# class too big for one file gives responsibilities to collaborating objects it holds.
def test_no_class_takes_its_methods_from_another_module() -> None:
    offenders = {
        str(path.relative_to(ROOT)): borrowed
        for package in ("broker", "exchanges", "storage", "pipeline")
        for path in sources(package)
        if (borrowed := borrowed_methods(path))
    }
    assert offenders == {}


def test_the_borrowed_method_checker_finds_them(tmp_path: Path) -> None:
    path = tmp_path / "m.py"
    path.write_text(
        "from leveret import helpers\nfrom leveret.tools import run\n\n"
        "class C:\n    go = helpers.go\n    start = run\n    LIMIT = 5\n"
    )
    assert borrowed_methods(path) == ["C.go", "C.start"]


def test_type_only_imports_close_no_circle_inside_a_layer_only(tmp_path: Path) -> None:
    package = tmp_path / "broker"
    (package / "node").mkdir(parents=True)
    (package / "wire").mkdir()
    for folder in (package, package / "node", package / "wire"):
        (folder / "__init__.py").write_text("")
    guard = "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    "
    (package / "node" / "queue.py").write_text("from leveret.node.vhost import VHost\n")
    (package / "node" / "vhost.py").write_text(guard + "from leveret.node.queue import Q\n")
    (package / "node" / "low.py").write_text(guard + "from leveret.wire.conn import C\n")
    (package / "wire" / "conn.py").write_text("from leveret.node.low import x\n")
    assert circle_offences(package, ("leveret.node", "leveret.wire")) == [
        "leveret.node.low <-> leveret.wire.conn"
    ]
    assert circle_offences(package) == [
        "leveret.node.low <-> leveret.wire.conn",
        "leveret.node.queue <-> leveret.node.vhost",
    ]
