"""The import graph of the ``caldera`` package: no cycles, no upward imports, no private names across packages.

Every ``import`` and ``from … import`` statement of every module of the package is read with :mod:`ast`,
wherever it stands: at module level, inside a function or method, under ``if TYPE_CHECKING:``. Imports inside
functions can hide a cycle (a module-level import one way, a function-level import the other, possibly through
several modules): Python only resolves them when the function runs, so nothing fails at import time while the
modules still depend on each other. Relative imports (``from . import x``,
``from ..y import z``) are resolved against the importing module's package. ``from pkg import name`` is an edge to
the submodule ``pkg.name`` when there is one, else to ``pkg`` itself. Importing ``a.b.c`` also runs the
``__init__`` of ``a`` and ``a.b``; those implied edges are not counted (every package ``__init__`` would otherwise
sit on a cycle with its own submodules' imports of their siblings).

Layering, lowest first. A module may import modules of its own layer and of the layers below, never above:

====  ==============  ===========================================================================================
rank  layer           modules
====  ==============  ===========================================================================================
0     foundation      ``arguments``, ``atomic``, ``bits``, ``cache``, ``metrics``, ``numerics``, ``openmp``,
                      ``paper_reference``, ``stats``, ``strict_yaml``, ``synthetic``, ``validation``, ``version``,
                      ``algorithm.matmul_precision``: files, numbers, tables, options, checks and the process
                      environment (the float32 product mode among them), knowing no algorithm
1     primitives      ``quantizers``, ``algorithm.hadamard``, ``algorithm.triangular``: codebooks, transforms and
                      triangular products
2     algorithm       ``algorithm`` (``ldl``, ``ldlq``, ``lplr``, ``regression``, ``config``, ``decomposition``),
                      ``methods``, and ``config``, ``decomposition``, ``lplr`` (the documented import paths of
                      their ``algorithm`` modules): pure functions on matrices (Algorithm 1 and 2, the baselines,
                      the method registry)
3     kernels         ``kernels``: compressed matmuls from stored codes (C, Numba, Triton) and their dispatcher
4     nn              ``nn``: the compressed layer ``CompressedLinear`` (storage format, forward, kernel choice)
5     pipeline        ``pipeline``: whole models (assets, text, Hessians, compression, checkpoints, HF loading)
6     evaluation      ``eval``, ``finetune``: libraries that measure or train models
7     planning        ``experiments.planning``: the workflow config's typed settings and checks, the plan (variants,
                      table rows, replicates), the rows of Tables 5 and 6, the figures' and the selection's plans,
                      and the cost of a run before it starts
8     report          ``experiments.report``: every table, plot and claim, from small result files, and the
                      matrix-level report of the App. G.1 ablations on seeded matrices
9     jobs            ``experiments.jobs``: one module per workflow rule family, each job's ``step_*`` function
10    entry points    ``cli``, ``api`` (the Python functions of the commands), ``api_reference`` (docs/api.md) and
                      the package ``caldera`` itself (its lazy public API and the transformers hook)
====  ==============  ===========================================================================================

The theory checks live outside the package, in the top-level ``theory/`` (checks, report and their tests): they
import ``caldera``, and no module of ``caldera`` may import ``theory``, at any level or inside a function.

Two more rules: a private name (``_x``) is imported only inside its own package (``pipeline.checkpoint.convert`` may
use ``pipeline.checkpoint.loader._assemble``, ``experiments.jobs`` may not; ``kernels.native`` may not use
``algorithm.hadamard._factor_matrix``; in the report layer, ``experiments.report``, not even from a sibling module),
and only the dispatcher :mod:`caldera.kernels.fused` and the kernels' shared modules are imported from outside
``caldera.kernels``: the backends (``cpu``, ``native``, ``triton_e8p``) are its business.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import pytest

PACKAGE = "caldera"
ROOT = Path(__file__).resolve().parents[1] / PACKAGE

#: Layers, lowest first: (name, module prefixes). A module's layer is that of its longest matching prefix.
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("foundation", ("arguments", "atomic", "bits", "cache", "algorithm.matmul_precision", "metrics", "numerics",
                    "openmp", "paper_reference", "stats", "strict_yaml", "synthetic", "validation", "version")),
    ("primitives", ("quantizers", "algorithm.hadamard", "algorithm.triangular")),
    # "config", "decomposition", "lplr": the documented import paths of their caldera.algorithm modules
    ("algorithm", ("algorithm", "methods", "config", "decomposition", "lplr")),
    ("kernels", ("kernels",)),
    ("nn", ("nn",)),
    ("pipeline", ("pipeline",)),
    ("evaluation", ("eval", "finetune")),
    ("planning", ("experiments", "experiments.planning")),  # "experiments": the package's own (empty) __init__
    ("report", ("experiments.report",)),
    ("jobs", ("experiments.jobs",)),
    ("entry points", ("cli", "api", "api_reference", "")),  # "": the package's own __init__
)
#: Modules of ``caldera.kernels`` that only the kernels package imports (its dispatcher chooses among them).
KERNEL_BACKENDS = ("caldera.kernels.cpu", "caldera.kernels.native", "caldera.kernels.triton_e8p",
                   "caldera.kernels.triton_e8p_gemv")


@dataclass(frozen=True)
class Edge:
    """``source`` imports ``target`` at ``line`` (``names``: what a ``from`` import takes from it)."""

    source: str
    target: str
    line: int
    names: tuple[str, ...] = ()

    def __str__(self) -> str:
        what = f" ({', '.join(self.names)})" if self.names else ""
        return f"{self.source}:{self.line} imports {self.target}{what}"


def modules(root: Path, package: str) -> dict[str, tuple[Path, bool]]:
    """``{dotted module name: (file, is a package __init__)}`` of every ``.py`` file under ``root``."""
    out = {}
    for path in sorted(root.rglob("*.py")):
        parts = [package, *path.relative_to(root).with_suffix("").parts]
        is_package = parts[-1] == "__init__"
        out[".".join(parts[:-1] if is_package else parts)] = (path, is_package)
    return out


def _owning_module(name: str, known: dict) -> str | None:
    """The longest prefix of dotted ``name`` that is a module of the package (None: outside it)."""
    while name and name not in known:
        name = name.rpartition(".")[0]
    return name or None


def import_edges(root: Path, package: str) -> dict[str, list[Edge]]:
    """Every module's imports of other modules of ``package`` (module level and inside functions alike)."""
    known = modules(root, package)
    graph: dict[str, list[Edge]] = {}
    for name, (path, is_package) in known.items():
        here = name if is_package else name.rpartition(".")[0]
        edges: list[Edge] = []
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                found = [(alias.name, ()) for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = here.split(".")[: len(here.split(".")) - (node.level - 1)]
                    mod = ".".join(base + ([node.module] if node.module else []))
                else:
                    mod = node.module or ""
                subs = [f"{mod}.{a.name}" for a in node.names if f"{mod}.{a.name}" in known]
                names = tuple(a.name for a in node.names if f"{mod}.{a.name}" not in known)
                found = [(sub, ()) for sub in subs] + ([(mod, names)] if names else [])
            else:
                continue
            for dotted, names in found:
                target = _owning_module(dotted, known)
                if target is not None and target != name:
                    edges.append(Edge(name, target, node.lineno, names))
        graph[name] = edges
    return graph


def cycles(graph: dict[str, list[Edge]]) -> list[list[Edge]]:
    """One cycle (as its edges) through every strongly connected component of more than one module."""
    return [_shortest_cycle(graph, c) for c in strongly_connected(graph) if len(c) > 1]


def strongly_connected(graph: dict[str, list[Edge]]) -> list[set[str]]:
    """The strongly connected components of the graph (Tarjan): modules that all reach each other."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[set[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for e in graph.get(v, []):
            if e.target not in index:
                visit(e.target)
                low[v] = min(low[v], low[e.target])
            elif e.target in on_stack:
                low[v] = min(low[v], index[e.target])
        if low[v] == index[v]:
            comp = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.add(w)
                if w == v:
                    break
            components.append(comp)

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return components


def _shortest_cycle(graph: dict[str, list[Edge]], component: set[str]) -> list[Edge]:
    """The shortest cycle through the component's first module (breadth-first inside the component)."""
    start = min(component)
    came: dict[str, Edge] = {}
    frontier = [start]
    while frontier:
        nxt = []
        for v in frontier:
            for e in graph[v]:
                if e.target not in component or e.target in came:
                    continue
                came[e.target] = e
                if e.target == start:
                    path = [e]
                    while path[0].source != start:
                        path.insert(0, came[path[0].source])
                    return path
                nxt.append(e.target)
        frontier = nxt
    raise AssertionError(f"no cycle through {start} in its strongly connected component")


def layer_of(module: str, package: str = PACKAGE) -> int | None:
    """Rank of ``module`` in :data:`LAYERS` (None: no layer names it)."""
    rel = module.removeprefix(package).removeprefix(".")
    best: tuple[int, int] | None = None
    for rank, (_, prefixes) in enumerate(LAYERS):
        for p in prefixes:
            if rel == p or (p and rel.startswith(p + ".")):
                if best is None or len(p) > best[1]:
                    best = (rank, len(p))
    return None if best is None else best[0]


def _parent(module: str, graph_modules: dict) -> str:
    return module if graph_modules[module][1] else module.rpartition(".")[0]


def _describe(cycle: list[Edge]) -> str:
    return " -> ".join([cycle[0].source] + [f"{e.target} (line {e.line} of {e.source})" for e in cycle])


GRAPH = import_edges(ROOT, PACKAGE)
EDGES = [e for edges in GRAPH.values() for e in edges]


def test_every_module_has_a_layer():
    missing = sorted(m for m in GRAPH if layer_of(m) is None)
    assert not missing, f"modules without a layer (add them to LAYERS): {missing}"


def test_no_import_cycles():
    found = [(sorted(c), _shortest_cycle(GRAPH, c)) for c in strongly_connected(GRAPH) if len(c) > 1]
    assert not found, "import cycles:\n  " + "\n  ".join(
        f"{_describe(cycle)}\n    (modules that all import each other: {', '.join(comp)})" for comp, cycle in found)


def test_no_upward_imports():
    up = [f"{e} [{LAYERS[layer_of(e.source)][0]} -> {LAYERS[layer_of(e.target)][0]}]"
          for e in EDGES if (layer_of(e.target) or 0) > (layer_of(e.source) or 0)]
    assert not up, "imports of a higher layer:\n  " + "\n  ".join(up)


def external_imports(root: Path, package: str, outside: str) -> list[str]:
    """Every import of the top-level package ``outside`` (or its modules) by a module of ``package``."""
    found = []
    for name, (path, _) in modules(root, package).items():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level:
                targets = [node.module or ""]
            else:
                continue
            found += [f"{name}:{node.lineno} imports {t}" for t in targets
                      if t == outside or t.startswith(outside + ".")]
    return found


def test_the_library_never_imports_the_theory_checks():
    """``theory/`` (checks, report, tests) sits on top of ``caldera``; the library must not depend on it."""
    bad = external_imports(ROOT, PACKAGE, "theory")
    assert not bad, ("caldera imports the theory package (theory imports caldera, never the reverse):\n  "
                     + "\n  ".join(bad))


def test_private_names_stay_in_their_package():
    known = modules(ROOT, PACKAGE)
    bad = [str(e) for e in EDGES
           if any(n.startswith("_") and not n.startswith("__") for n in e.names)
           and _parent(e.source, known) != _parent(e.target, known)]
    assert not bad, "private names imported from another package (give them a public name):\n  " + "\n  ".join(bad)


def test_report_modules_import_only_public_names_of_each_other():
    """The report layer's modules (tables, claims, plots, …) share only public names: a helper another module of
    the layer needs is public in the module that owns it."""
    bad = [str(e) for e in EDGES if e.source.startswith("caldera.experiments.report")
           and any(n.startswith("_") and not n.startswith("__") for n in e.names) and e.source != e.target]
    assert not bad, "private names imported from another module of the report layer:\n  " + "\n  ".join(bad)


def test_only_the_kernels_package_imports_the_kernel_backends():
    bad = [str(e) for e in EDGES if e.target in KERNEL_BACKENDS and not e.source.startswith("caldera.kernels")]
    assert not bad, ("kernel backends imported outside caldera.kernels (go through caldera.kernels.fused):\n  "
                     + "\n  ".join(bad))


# ------------------------------------------------------------------------------------- the checker itself


def _write(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        p = root / "pkg" / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    return root / "pkg"


def test_checker_finds_cycles_hidden_in_functions_and_relative_imports(tmp_path):
    """A three-module cycle: a module-level import one way, imports inside functions (one of them relative) the
    other way."""
    pkg = _write(tmp_path, {
        "__init__.py": "",
        "kernels/__init__.py": "",
        "kernels/cpu.py": "def f():\n    from pkg.kernels import native\n",
        "kernels/native.py": "from pkg.kernels.fused import Factors\n",
        "kernels/fused.py": "class Factors: ...\ndef g():\n    from . import cpu\n",
        "kernels/tables.py": "import pkg.kernels.fused\n",
    })  # fmt: skip
    graph = import_edges(pkg, "pkg")
    assert [e.target for e in graph["pkg.kernels.fused"]] == ["pkg.kernels.cpu"]
    found = cycles(graph)
    assert len(found) == 1
    assert {e.source for e in found[0]} == {"pkg.kernels.cpu", "pkg.kernels.native", "pkg.kernels.fused"}
    assert found[0][0].source == found[0][-1].target  # a closed path, printed edge by edge
    assert "line 2 of pkg.kernels.cpu" in _describe(found[0])


def test_checker_resolves_parent_relative_imports_and_names_of_modules(tmp_path):
    """The shape of the claims ↔ selection cycle: ``from ..x import NAME`` and ``from pkg.a import b`` with ``b`` a
    module are edges to the modules they name."""
    pkg = _write(tmp_path, {
        "__init__.py": "",
        "experiments/__init__.py": "",
        "experiments/claims.py": "def w():\n    from .selection import configuration_notes\n",
        "experiments/selection.py": "def a():\n    from ..experiments.claims import ABLATION_CLAIMS, _x\n",
        "cli.py": "from pkg import experiments\nfrom pkg.experiments import claims\n",
    })  # fmt: skip
    graph = import_edges(pkg, "pkg")
    assert [(e.target, e.names) for e in graph["pkg.experiments.selection"]] == [
        ("pkg.experiments.claims", ("ABLATION_CLAIMS", "_x"))]
    assert [e.target for e in graph["pkg.cli"]] == ["pkg.experiments", "pkg.experiments.claims"]
    assert len(cycles(graph)) == 1


def test_checker_finds_imports_of_an_outside_package(tmp_path):
    pkg = _write(tmp_path, {
        "__init__.py": "",
        "a.py": "import theory.report\nimport theoryx\n",
        "b.py": "def f():\n    from theory import common\n    from .theory import x\n",
    })  # fmt: skip
    assert external_imports(pkg, "pkg", "theory") == ["pkg.a:1 imports theory.report", "pkg.b:2 imports theory"]


@pytest.mark.parametrize("module, layer", [
    ("caldera", "entry points"), ("caldera.cli", "entry points"), ("caldera.algorithm.ldl", "algorithm"),
    ("caldera.algorithm.ldlq", "algorithm"), ("caldera.algorithm.hadamard", "primitives"),
    ("caldera.algorithm.matmul_precision", "foundation"), ("caldera.algorithm", "algorithm"),
    ("caldera.kernels.native", "kernels"), ("caldera.nn.compressed_linear", "nn"),
    ("caldera.experiments.planning.plan", "planning"), ("caldera.experiments.report.tables", "report"),
    ("caldera.experiments.jobs.evaluate", "jobs"), ("caldera.cache", "foundation"),
])  # fmt: skip
def test_layer_of_matches_whole_names(module, layer):
    assert LAYERS[layer_of(module)][0] == layer
