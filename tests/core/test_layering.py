"""The code keeps the design's layering (README's layer table): no import circle in flowserve/, exporter/, server/
and clients/ (installed as flowserve, flowserve.exporter, flowserve.server,
flowserve.clients), the arrows of README's layer table between their packages, few
function-local imports (each with its reason), a bottom dispatch layer that knows no Tensor,
and a lazy package, so that the clients load no core."""

from __future__ import annotations

import ast
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import flowserve

PACKAGE = Path(flowserve.__file__).parent
BACKEND = "flowserve.onnx_backend"
CORE_OUT = ("flowserve.tensor", "flowserve.ops", "flowserve.exporter", "flowserve.server", "flowserve.api")


ABOVE_CORE = ("flowserve.exporter", "flowserve.server", "flowserve.clients")  # installed from exporter/, server/, clients/
ROOTS = {"flowserve": PACKAGE,
         **{name: Path(importlib.util.find_spec(name).submodule_search_locations[0]) for name in ABOVE_CORE}}

# What each package above the core may import when it loads (README's layer table); a
# package is ``flowserve.<name>``, its modules included.
ALLOWED = {
    "flowserve.protocol": set(),
    "flowserve.format": {"flowserve.dtypes", "flowserve.errors"},
    "flowserve.clients": {"flowserve.protocol"},
    "flowserve.server": {"flowserve.errors", "flowserve.exporter", "flowserve.format", "flowserve.onnx_backend",
                         "flowserve.protocol", "flowserve.utils"},
    "flowserve.onnx_backend": {"flowserve.backends", "flowserve.dispatch", "flowserve.dtypes", "flowserve.errors",
                               "flowserve.ir", "flowserve.ops", "flowserve.utils"},
    "flowserve.exporter": {"flowserve.dtypes", "flowserve.errors", "flowserve.format", "flowserve.ir",
                           "flowserve.onnx_backend", "flowserve.ops", "flowserve.serialization"},
}


def modules() -> dict[str, Path]:
    """Every module of the four packages, by its installed name (generated protos left out)."""
    found = {}
    for package, root in ROOTS.items():
        for path in root.rglob("*.py"):
            if "protos" in path.parts:
                continue
            parts = [*package.split("."), *path.relative_to(root).with_suffix("").parts]
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


def package_of(module: str) -> str:
    """``flowserve.server.http.app`` -> ``flowserve.server``."""
    return ".".join(module.split(".")[:2])


def module_level_imports(tree: ast.Module, name: str, is_package: bool) -> list[str]:
    """Absolute names imported when the module runs (not inside functions or TYPE_CHECKING)."""
    out, stack = [], list(tree.body)
    while stack:
        node = stack.pop()
        if isinstance(node, ast.Import):
            out += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = name.split(".") if is_package else name.split(".")[:-1]
                base = ".".join(anchor[:len(anchor) - node.level + 1] + ([base] if base else []))
            out += [f"{base}.{a.name}" for a in node.names] + [base]
        elif isinstance(node, ast.If) and "TYPE_CHECKING" not in ast.dump(node.test):
            stack += node.body + node.orelse
        elif isinstance(node, ast.Try):
            stack += node.body + node.orelse + node.finalbody + [s for h in node.handlers for s in h.body]
    return out


def import_graph() -> dict[str, set[str]]:
    """Module -> flowserve modules it runs at import, with the packages those live in
    (a package's ``__init__`` runs first), leaving out the module's own ancestors."""
    mods = modules()
    graph = {}
    for name, path in mods.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        deps = set()
        for target in module_level_imports(tree, name, path.name == "__init__.py"):
            parts = target.split(".")
            for i in range(1, len(parts) + 1):
                dep = ".".join(parts[:i])
                if dep in mods and dep != name and not name.startswith(dep + "."):
                    deps.add(dep)
        graph[name] = deps
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (iterative Tarjan)."""
    index, low, on_stack, stack, found, counter = {}, {}, set(), [], [], [0]
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter[0]
        counter[0] += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter[0]
                    counter[0] += 1
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


def test_cycle_finder_finds_a_circle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_circle_in_flowserve():
    found = cycles(import_graph())
    assert not found, "import circles among flowserve modules:\n" + "\n".join(" <-> ".join(c) for c in found)


def test_the_graph_covers_the_four_packages():
    graph = import_graph()
    assert {package_of(m) for m in graph} >= {*ABOVE_CORE, "flowserve.onnx_backend", "flowserve.nn"}
    assert "flowserve.protocol" in graph["flowserve.clients.tensors"]


def test_packages_above_the_core_import_only_what_the_layer_table_allows():
    wrong = [f"{module} imports {dep}" for module, deps in import_graph().items()
             if package_of(module) in ALLOWED
             for dep in deps
             if package_of(dep) != package_of(module) and package_of(dep) not in ALLOWED[package_of(module)]]
    assert not wrong, "imports against the layer table:\n" + "\n".join(sorted(wrong))


def test_the_arrow_check_sees_a_wrong_arrow():
    graph = {"flowserve.clients.cli": {"flowserve.server.app"}}
    assert [d for m, deps in graph.items() for d in deps if package_of(d) not in ALLOWED[package_of(m)]]


def test_the_dispatch_layer_knows_no_tensor_and_no_op():
    deps = import_graph()["flowserve.dispatch"]
    assert deps <= {"flowserve.dtypes", "flowserve.errors", "flowserve.autograd", "flowserve.autograd.tape"}, deps
    assert import_graph()["flowserve.autograd.tape"] <= {"flowserve.errors"}


def test_the_core_knows_no_onnx_at_import():
    """Of flowserve's core (all but the CLI and the demo), only the ONNX backend
    (``flowserve.onnx_backend``) imports ONNX or ONNX Runtime when it loads, and no module
    imports the exporter or the server: they sit above the core."""
    onnx_names, above = ("onnx", "onnxruntime"), ("flowserve.exporter", "flowserve.server")
    offenders = []
    for name, path in modules().items():
        if name in ("flowserve.cli", "flowserve.demo") or name.startswith(ABOVE_CORE):
            continue
        in_backend = name == BACKEND or name.startswith(BACKEND + ".")
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for target in module_level_imports(tree, name, path.name == "__init__.py"):
            if (target.split(".")[0] in onnx_names and not in_backend) or target.startswith(above):
                offenders.append(f"{name}: {target}")
    assert not offenders, offenders


def test_function_local_imports_are_few_and_say_why():
    local = []
    for name, path in modules().items():
        source = path.read_text(encoding="utf-8")
        lines = source.splitlines()
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                for inner in ast.walk(node):
                    if isinstance(inner, (ast.Import, ast.ImportFrom)):
                        local.append((name, inner.lineno, lines[inner.lineno - 1]))
    assert len(local) <= 36, f"{len(local)} function-local imports:\n" + "\n".join(map(str, local))
    unexplained = [f"{n}:{line}: {text.strip()}" for n, line, text in local if "# local: " not in text]
    assert not unexplained, "function-local imports without a '# local: reason' comment:\n" + "\n".join(unexplained)


def _run(code: str) -> str:
    env = dict(os.environ, PYTHONPATH=str(PACKAGE.parent))
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_importing_the_clients_loads_no_core_exporter_or_server():
    loaded = _run("import sys, flowserve.clients, flowserve.clients.cli\n"
                  f"print(sorted(m for m in sys.modules if m.startswith({CORE_OUT!r})))")
    assert loaded == "[]"
    loaded = _run("import runpy, sys\nsys.argv = ['flowserve.clients', '--help']\n"
                  "try:\n    runpy.run_module('flowserve.clients', run_name='__main__')\n"
                  "except SystemExit:\n    pass\n"
                  f"print(sorted(m for m in sys.modules if m.startswith({CORE_OUT!r})))")
    assert loaded.splitlines()[-1] == "[]" and "--model" in loaded


def test_the_package_is_lazy_but_complete():
    out = _run("import sys, flowserve as flow\n"
               "print('flowserve.tensor' in sys.modules)\n"
               "import flowserve.tensor, flowserve.device\n"
               "print(flow.tensor([1.0, 2.0]).sum().item(), flow.device('cpu'), 'add' in dir(flow))\n"
               "from flowserve import *\n"
               "print(callable(tensor), zeros(2).tolist())")
    assert out.splitlines() == ["False", "3.0 cpu True", "True [0.0, 0.0]"]


def test_the_backend_runtime_loads_no_core_above_it():
    """The server takes its ONNX Runtime sessions from the backend's ``runtime`` module,
    which must load no tensor, ops, autograd, nn, optim or exporter."""
    above = CORE_OUT + ("flowserve.nn", "flowserve.autograd", "flowserve.optim")
    loaded = _run(f"import sys, {BACKEND}.runtime\n"
                  f"print(sorted(m for m in sys.modules if m.startswith({above!r})))")
    assert loaded == "[]"
