"""The package has no import cycles: every `import`/`from ... import` of every module of sage_co (at any depth of
the module, function-local ones included) is an edge of a graph that must be acyclic, and the emulator keeps its
imports at module level."""
import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PKG = ROOT / "sage_co"


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in PKG.rglob("*.py")}


def _resolve(mod: str, is_pkg: bool, node: ast.ImportFrom) -> str:
    if node.level == 0:
        return node.module or ""
    base = mod.split(".") if is_pkg else mod.split(".")[:-1]
    base = base[:len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def import_graph() -> dict[str, set[str]]:
    mods = _modules()
    graph = {m: set() for m in mods}
    for mod, path in mods.items():
        tree = ast.parse(path.read_text(), str(path))
        is_pkg = path.name == "__init__.py"
        for node in ast.walk(tree):
            targets = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = _resolve(mod, is_pkg, node)
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in mods else base for a in node.names]
            for t in targets:
                # importing a.b.c runs a and a.b first; the edge that matters is to the deepest module of ours
                while t and t not in mods:
                    t = t.rpartition(".")[0]
                if t and t != mod and t.startswith("sage_co"):
                    graph[mod].add(t)
    return graph


def find_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every elementary cycle found by a DFS (one per back edge), as module lists."""
    cycles, state, stack = [], {}, []

    def visit(m):
        state[m] = 1
        stack.append(m)
        for n in sorted(graph.get(m, ())):
            if state.get(n) == 1:
                cycles.append(stack[stack.index(n):] + [n])
            elif n not in state:
                visit(n)
        stack.pop()
        state[m] = 2

    for m in sorted(graph):
        if m not in state:
            visit(m)
    return cycles


def _is_parent_edge(a: str, b: str) -> bool:
    # a package's __init__ importing its own submodule (and the submodule its package) is how Python packages are
    # built, not a cycle between two jobs
    return b.startswith(a + ".") or a.startswith(b + ".")


def test_find_cycles_sees_a_cycle():
    assert find_cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == [["a", "b", "c", "a"]]
    assert find_cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycles_in_the_package():
    graph = import_graph()
    assert "sage_co.emu.executor" in graph and "sage_co.emu.state" in graph["sage_co.emu.executor"]
    pruned = {m: {n for n in deps if not _is_parent_edge(m, n)} for m, deps in graph.items()}
    cycles = find_cycles(pruned)
    assert cycles == [], "import cycles: " + "; ".join(" -> ".join(c) for c in cycles)


def test_emulator_imports_at_module_level():
    """No function-local imports of the package's own modules inside sage_co/emu (they hid the cycles)."""
    local = []
    for path in sorted((PKG / "emu").glob("*.py")):
        tree = ast.parse(path.read_text())
        for fn in ast.walk(tree):
            if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                for node in ast.walk(fn):
                    if isinstance(node, (ast.Import, ast.ImportFrom)):
                        local.append(f"{path.name}:{node.lineno}")
    assert local == []


def test_state_is_a_leaf_and_declares_its_fields():
    graph = import_graph()
    assert {d for d in graph["sage_co.emu.state"] if d.startswith("sage_co")} == set()
    from sage_co.emu.state import State
    assert not hasattr(State, "__dict__") or "__slots__" in State.__dict__
