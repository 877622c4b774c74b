"""The package's folders are its layers (docs/architecture.md): every import points down the
layer order, and no modules import each other in a circle.

Imports are read from the source with `ast`: module-level, function-level and
`TYPE_CHECKING` imports all count, since each is a dependency a reader must follow.
`from replay.x import name` counts as an import of `replay.x.name` when that is a module,
else of `replay.x`.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "replay"

# bottom to top; a module may import from its own layer and the layers below it
LAYERS = (
    "foundation",  # errors.py and the private helpers replay/_*.py
    "trace",
    "workload",
    "analysis",
    "system",
    "plugins",  # policies/ and checkpoint/
    "engine",
    "report",  # reads result folders: foundation modules only (checked below)
    "plan",  # replay plan: answers for a whole training run, from every layer below
    "runs",  # quickstart runs the studies and a plan, then writes their report
    "api",  # replay/__init__.py: the documented Python API
    "cli",
    "entry",  # the console script: replay/_console.py, replay/__main__.py
)
FOLDERS = {"policies": "plugins", "checkpoint": "plugins"}
MAX_LINES = 800 * 1.1  # "about 800": a module that grows past this is split


def layer_of(module: str) -> str:
    parts = module.split(".")
    if module in ("replay._console", "replay.__main__"):
        return "entry"
    if module == "replay":
        return "api"
    if len(parts) == 2 and (parts[1].startswith("_") or parts[1] == "errors"):
        return "foundation"
    layer = FOLDERS.get(parts[1], parts[1])
    assert layer in LAYERS, f"{module}: not in a layer folder (docs/architecture.md)"
    return layer


def modules(root: Path = PACKAGE) -> dict[str, Path]:
    found = {}
    for path in sorted(root.rglob("*.py")):
        parts = list(path.relative_to(root.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def import_graph(found: dict[str, Path]) -> dict[str, set[str]]:
    """module -> the package modules it imports (anywhere in its source)."""

    def resolve(name: str) -> str | None:
        while name and name not in found:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {}
    for module, path in found.items():
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        targets: set[str | None] = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets.update(resolve(a.name) for a in node.names if a.name.startswith("replay"))
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")[: len(package.split(".")) - node.level + 1]
                    source = ".".join(base + ([node.module] if node.module else []))
                else:
                    source = node.module or ""
                if source == "replay" or source.startswith("replay."):
                    targets.update(resolve(f"{source}.{a.name}") for a in node.names)
        graph[module] = {t for t in targets if t is not None and t != module}
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
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
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def upward(graph: dict[str, set[str]]) -> list[str]:
    """Imports that point up the layer order."""
    return [
        f"{module} -> {target}"
        for module, targets in sorted(graph.items())
        for target in sorted(targets)
        if LAYERS.index(layer_of(target)) > LAYERS.index(layer_of(module))
    ]


GRAPH = import_graph(modules())


def test_no_import_circles() -> None:
    assert circles(GRAPH) == []


def test_imports_point_down_the_layers() -> None:
    assert upward(GRAPH) == []


def test_report_reads_results_only() -> None:
    """report/ renders result folders: it imports no model, engine or run code."""
    leaks = [
        f"{m} -> {t}"
        for m, targets in GRAPH.items()
        if layer_of(m) == "report"
        for t in targets
        if layer_of(t) not in ("foundation", "report")
    ]
    assert leaks == []


def test_only_foundation_modules_beside_the_folders() -> None:
    loose = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert all(
        name.startswith("_") or name in ("errors.py", "__init__.py", "__main__.py")
        for name in loose
    ), loose


def test_no_module_is_much_over_800_lines() -> None:
    long = {
        str(path.relative_to(PACKAGE.parent)): n
        for path in PACKAGE.rglob("*.py")
        if (n := len(path.read_text().splitlines())) > MAX_LINES
    }
    assert long == {}


# The four circles the package had before its folders were its layers (issue 24), each
# as the import that would bring it back: the checks above must catch every one.
OLD_CIRCLES = [
    # mrc took machine_description and peak_rss_bytes from bench
    ("replay.analysis.mrc", "replay.runs.bench"),
    # the batch-range view took table_runs from the statistics, which read on-the-fly
    # workloads, which build ranges
    ("replay.trace.stream", "replay.analysis.stats"),
    # the workload spec resolved presets, which are specs
    ("replay.workload.spec", "replay.workload.presets"),
    # the policies took BatchRange from the engine, which runs them
    ("replay.policies.base", "replay.engine.replay"),
    # and system specs checked policy names in the policies' registry
    ("replay.system.spec", "replay.policies"),
]


@pytest.mark.parametrize(("module", "target"), OLD_CIRCLES, ids=lambda v: v)
def test_the_old_circles_would_be_caught(module: str, target: str) -> None:
    assert module in GRAPH and target in GRAPH
    graph = {m: set(t) for m, t in GRAPH.items()}
    graph[module].add(target)
    assert upward(graph) or circles(graph)


def test_the_checker_sees_function_level_and_type_checking_imports(tmp_path: Path) -> None:
    root = tmp_path / "replay"
    (root / "trace").mkdir(parents=True)
    (root / "engine").mkdir()
    for init in (root, root / "trace", root / "engine"):
        (init / "__init__.py").write_text("")
    (root / "trace" / "a.py").write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from replay.engine.b import B\n"
        "def f():\n    from replay.engine import c\n"
    )
    (root / "engine" / "b.py").write_text("from replay.trace.a import f\nB = 1\n")
    (root / "engine" / "c.py").write_text("")
    graph = import_graph(modules(root))
    assert graph["replay.trace.a"] == {"replay.engine.b", "replay.engine.c"}
    assert circles(graph) == [["replay.engine.b", "replay.trace.a"]]
    assert upward(graph) == [
        "replay.trace.a -> replay.engine.b",
        "replay.trace.a -> replay.engine.c",
    ]
