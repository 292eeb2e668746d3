"""The packages import in one direction: no module of ``labkit.losses`` or ``labkit.advantages``
imports, at the top or inside a function, a module that imports it back (a circle hidden in a
function is one import order away from a half-initialised module), and the configuration stands
above the methods it reads."""

import ast
from pathlib import Path

import pytest

LABKIT = Path(__file__).resolve().parents[1] / "labkit"


def imports_of(path: Path) -> set[str]:
    """Every ``labkit...`` module ``path`` imports anywhere in its body (functions included)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found |= {f"{node.module}.{alias.name}" for alias in node.names}
    return {name for name in found if name.startswith("labkit.")}


def circle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of ``graph`` as a path of module names, or None."""
    state: dict[str, int] = {}

    def visit(node, path):
        state[node] = 1
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return [*path[path.index(nxt):], nxt]
            if nxt not in state and (found := visit(nxt, [*path, nxt])):
                return found
        state[node] = 2
        return None

    for start in sorted(graph):
        if start not in state and (found := visit(start, [start])):
            return found
    return None


@pytest.mark.parametrize("package", ["losses", "advantages"])
def test_a_method_package_has_no_import_circle(package):
    modules = {f"labkit.{package}.{p.stem}": p for p in (LABKIT / package).glob("*.py")
               if p.stem != "__init__"}
    graph = {name: imports_of(path) & set(modules) for name, path in modules.items()}
    assert circle(graph) is None, " -> ".join(circle(graph))


def test_the_circle_finder_finds_a_circle():
    assert circle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert circle({"a": {"b"}, "b": set()}) is None


def test_no_module_of_labkit_imports_one_that_imports_it_back():
    """The same rule across the whole package: between any two modules (package ``__init__`` files
    aside, whose job is to gather their folder), imports run one way."""
    modules = {".".join(p.relative_to(LABKIT.parent).with_suffix("").parts): p
               for p in LABKIT.rglob("*.py") if p.stem != "__init__"}
    graph = {name: imports_of(path) & set(modules) for name, path in modules.items()}
    assert circle(graph) is None, " -> ".join(circle(graph))


def room_of(module: str) -> str:
    """The room of a ``labkit.X...`` module name: the top-level folder or file ``X``."""
    return module.split(".")[1]


def test_the_config_stands_above_the_methods_it_reads():
    """``labkit.config`` imports the method rooms to read their menus, settings and rules; the
    methods declare those through ``labkit.plugins``. So no module of a room that the config
    reaches (its imports, room to room: ``losses/``, ``advantages/``, ``rewards/``, ``tricks/``,
    ``training/``, ``offpolicy/``...) imports ``labkit.config``: that import would run back up, and
    the config would need a lazy loader to dodge the circle. The rooms above it (the trainer,
    the doctor, the commands, the TRL bridge, ``scale/``, ``viz/``, ``widgets/``) may. And
    ``labkit/config/__init__.py`` loads plainly: it defines no ``__getattr__``."""
    rooms: dict[str, set[str]] = {}
    files: dict[str, list[Path]] = {}
    for path in LABKIT.rglob("*.py"):
        room = path.relative_to(LABKIT).parts[0].removesuffix(".py")
        files.setdefault(room, []).append(path)
        rooms.setdefault(room, set()).update(map(room_of, imports_of(path)))
    below, todo = set(), ["config"]
    while todo:
        for room in rooms.get(todo.pop(), ()):
            if room not in below | {"config"}:
                below.add(room)
                todo.append(room)
    assert {"plugins", "losses", "advantages", "rewards", "tricks"} <= below
    upward = sorted(f"{path.relative_to(LABKIT.parent)} imports {name}"
                    for room in below for path in files[room]
                    for name in imports_of(path) if room_of(name) == "config")
    assert not upward, "\n".join(upward)
    tree = ast.parse((LABKIT / "config" / "__init__.py").read_text())
    assert "__getattr__" not in {node.name for node in tree.body
                                 if isinstance(node, ast.FunctionDef)}
