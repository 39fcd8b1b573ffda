"""Serving needs no training stack: ``import flowserve.server`` and ``flowserve serve``
load no ``nn``, ``autograd``, ``optim`` or ``distributed`` module and few flowserve
modules; the protocol and format packages import only what they own; the clients and the
server share the protocol (``flowserve.protocol``) and import nothing of each other."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import flowserve
import flowserve.clients
import flowserve.server

from ..core.test_layering import module_level_imports

TRAINING = ("flowserve.nn", "flowserve.autograd", "flowserve.optim", "flowserve.distributed")
MAX_SERVING_MODULES = 80  # flowserve modules (exporter, server and clients included)
PACKAGES = {"flowserve.server": Path(flowserve.server.__file__).parent,
            "flowserve.clients": Path(flowserve.clients.__file__).parent,
            "flowserve.protocol": Path(flowserve.__file__).parent / "protocol",
            "flowserve.format": Path(flowserve.__file__).parent / "format"}
REPORT = ("import json, sys\n"
          "names = sorted(m for m in sys.modules if m == 'flowserve' or m.startswith('flowserve.'))\n"
          "print(json.dumps(names))\n")


def loaded_by(code: str) -> list[str]:
    """The flowserve modules a fresh interpreter holds after running ``code``."""
    env = dict(os.environ, PYTHONPATH=str(Path(flowserve.__file__).parent.parent))
    done = subprocess.run([sys.executable, "-c", code + "\n" + REPORT], capture_output=True, text=True,
                          timeout=120, env=env)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def training_modules(names: list[str]) -> list[str]:
    return [m for m in names if m.startswith(tuple(p + "." for p in TRAINING)) or m in TRAINING]


def test_importing_the_server_loads_no_training_stack():
    names = loaded_by("import flowserve.server")
    assert not training_modules(names), training_modules(names)
    assert len(names) <= MAX_SERVING_MODULES, f"{len(names)} flowserve modules: {names}"


def test_starting_the_serve_command_loads_no_training_stack():
    """``flowserve serve --help`` runs the CLI as ``flowserve serve DIR`` does, up to
    starting the server (the server module and its settings)."""
    code = ("import sys\nsys.argv = ['flowserve', 'serve', '--help']\n"
            "from flowserve.cli import main\n"
            "try:\n    main()\nexcept SystemExit:\n    pass\n"
            "import flowserve.server.app")
    names = loaded_by(code)
    assert "flowserve.server.cli" in names
    assert not training_modules(names), training_modules(names)
    assert len(names) <= MAX_SERVING_MODULES, f"{len(names)} flowserve modules: {names}"


def test_the_protocol_and_format_packages_load_only_themselves():
    names = loaded_by("import flowserve.protocol.tensors, flowserve.protocol.protos.health\n"
                      "import flowserve.format.examples, flowserve.format.verification\n"
                      "import flowserve.format.onnx_metadata")
    own = ("flowserve.protocol", "flowserve.format")
    allowed = {"flowserve", "flowserve.errors", "flowserve.dtypes"}
    assert {m for m in names if not m.startswith(own)} <= allowed, names


def test_loading_a_saved_directory_loads_no_nn_or_optim(tmp_path):
    """A saved directory is exported when it loads: that loads the exporter's lowering and
    flowserve's ops, but not ``nn`` (modules, ``nn.Graph``) nor ``optim``."""
    import flowserve as flow

    class TinyGraph(flow.nn.Graph):
        def __init__(self):
            super().__init__()
            self.model = flow.nn.Sequential(flow.nn.Linear(4, 8), flow.nn.ReLU())

        def build(self, x):
            return self.model(x)

    graph = TinyGraph()
    graph(flow.randn(2, 4))
    flow.save(graph, tmp_path / "m")
    names = loaded_by("import pathlib\nfrom flowserve.server.loading import load_model_proto\n"
                      f"path = pathlib.Path({str(tmp_path / 'm')!r})\n"
                      "assert load_model_proto(path, root=path).graph.node")
    assert "flowserve.exporter.export" in names
    assert not [m for m in names if m.startswith(("flowserve.nn", "flowserve.optim"))]


def imports_of(package: str) -> dict[str, list[str]]:
    """Module of ``package`` -> every flowserve module it imports, inside functions too."""
    found = {}
    for path in sorted(PACKAGES[package].rglob("*.py")):
        parts = list(path.relative_to(PACKAGES[package]).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        name = ".".join([package] + parts)
        tree = ast.parse(path.read_text(encoding="utf-8"))
        every = ast.Module([n for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom))], [])
        found[name] = [t for t in module_level_imports(every, name, path.name == "__init__.py")
                       if t.startswith("flowserve")]
    return found


def refused(package: str, banned: tuple) -> list[str]:
    return [f"{name}: {target}" for name, targets in imports_of(package).items() for target in targets
            if target in banned or target.startswith(tuple(b + "." for b in banned))]


def test_clients_and_server_do_not_import_each_other():
    assert not refused("flowserve.server", ("flowserve.clients",))
    assert not refused("flowserve.clients", ("flowserve.server", "flowserve.exporter", "flowserve.format"))


def test_the_import_checks_resolve_relative_imports():
    tree = ast.parse("from ...clients import tensors\nfrom . import codec\n")
    targets = module_level_imports(tree, "flowserve.server.http.app", False)
    assert {"flowserve.clients.tensors", "flowserve.server.http.codec"} <= set(targets)


def test_protocol_and_format_import_no_core_exporter_server_or_clients():
    core = ("flowserve.tensor", "flowserve.ops", "flowserve.ir", "flowserve.api", "flowserve.exporter",
            "flowserve.server", "flowserve.clients", "flowserve.serialization") + TRAINING
    assert not refused("flowserve.protocol", core + ("flowserve.format",))
    assert not refused("flowserve.format", core + ("flowserve.protocol",))
