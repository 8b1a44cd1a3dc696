"""The floors of docs/architecture.md: each package imports only downward, and only
``engine/distributed.py`` touches ``torch.distributed``."""
from __future__ import annotations

import ast
import os

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGES = ("engine", "data", "middleware", "policies", "pipelines", "commands", "dizoo")

# what each floor may NOT import (of our own packages): engine -> nothing above it; data -> engine only;
# middleware and policies -> engine and data, never each other; only pipelines composes middleware and
# policies (the run assembly); commands (the baton command and the tools after training) sit above it;
# dizoo (env types and configs) -> engine, data, pipelines and commands (a config runs through cli_main)
FORBIDDEN = {
    "engine": {"data", "middleware", "policies", "pipelines", "commands", "dizoo"},
    "data": {"middleware", "policies", "pipelines", "commands", "dizoo"},
    "middleware": {"policies", "pipelines", "commands", "dizoo"},
    "policies": {"middleware", "pipelines", "commands", "dizoo"},
    "pipelines": {"commands", "dizoo"},
    "commands": {"dizoo"},
    "dizoo": {"middleware", "policies"},
}
#: the one module that makes collectives, and the runtime's modules beside it that touch torch.distributed without
#: one (the rendezvous store, the progress records, DDP's gradient-compression hooks)
DISTRIBUTED_HOME = os.path.join("engine", "distributed.py")
RUNTIME = {DISTRIBUTED_HOME, os.path.join("engine", "rendezvous.py"), os.path.join("engine", "rank_progress.py"),
           os.path.join("engine", "comm_hooks.py")}
COLLECTIVES = {"all_reduce", "all_gather", "all_gather_object", "all_gather_into_tensor", "broadcast",
               "broadcast_object_list", "barrier", "reduce", "reduce_scatter", "all_to_all", "gather", "scatter",
               "send", "recv", "isend", "irecv", "monitored_barrier"}


def _py_files(package):
    for dirpath, _, files in os.walk(os.path.join(ROOT, package)):
        for name in files:
            if name.endswith(".py"):
                yield os.path.join(dirpath, name)


def _imports(tree):
    """(imported module, node) for every absolute import, at any depth (deferred imports included)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, node
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield node.module, node
            for alias in node.names:
                yield f"{node.module}.{alias.name}", node


def _tree(path):
    with open(path, encoding="utf-8") as f:
        return ast.parse(f.read(), filename=path)


@pytest.mark.parametrize("package", PACKAGES)
def test_each_floor_imports_only_downward(package):
    for path in _py_files(package):
        rel = os.path.relpath(path, ROOT)
        for module, node in _imports(_tree(path)):
            top = module.split(".")[0]
            assert top not in FORBIDDEN[package], f"{rel}:{node.lineno} imports {module} ({package} may not)"


def _distributed_uses(tree):
    """Imports of torch.distributed and attribute chains torch.distributed.<x>."""
    for module, node in _imports(tree):
        if module == "torch.distributed" or module.startswith("torch.distributed."):
            yield node.lineno, module
    for node in ast.walk(tree):
        if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Attribute)
                and node.value.attr == "distributed" and isinstance(node.value.value, ast.Name)
                and node.value.value.id == "torch"):
            yield node.lineno, f"torch.distributed.{node.attr}"


def test_only_engine_distributed_touches_torch_distributed():
    """Collectives must run on the backend's device (a CPU tensor fails under nccl): one module owns them."""
    offenders = []
    for package in PACKAGES:
        for path in _py_files(package):
            rel = os.path.relpath(path, ROOT)
            if rel in RUNTIME:
                continue
            offenders += [f"{rel}:{line} uses {what}" for line, what in _distributed_uses(_tree(path))]
    assert not offenders, "only the distributed runtime may use torch.distributed:\n" + "\n".join(offenders)


def _collective_calls(tree):
    """Calls of a collective through ``torch.distributed`` or a name bound to it (``import torch.distributed as
    dist``, at any depth)."""
    aliases = {alias.asname for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names
               if alias.name == "torch.distributed" and alias.asname}
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in COLLECTIVES:
            owner = node.func.value
            if (isinstance(owner, ast.Name) and owner.id in aliases) or (
                    isinstance(owner, ast.Attribute) and owner.attr == "distributed"
                    and isinstance(owner.value, ast.Name) and owner.value.id == "torch"):
                yield node.lineno, node.func.attr


def test_only_engine_distributed_makes_collectives():
    """Inside the runtime too, one module makes every collective (each behind the guard, on the backend's
    device); the rendezvous store, the progress records and the hooks make none."""
    offenders = []
    for package in PACKAGES:
        for path in _py_files(package):
            rel = os.path.relpath(path, ROOT)
            if rel != DISTRIBUTED_HOME:
                offenders += [f"{rel}:{line} calls {name}" for line, name in _collective_calls(_tree(path))]
    assert not offenders, "collectives belong in engine/distributed.py:\n" + "\n".join(offenders)
    found = [name for _, name in _collective_calls(ast.parse("import torch.distributed as d\nd.all_reduce(x)\n"))]
    assert found == ["all_reduce"]  # the check is not vacuous


def test_distributed_check_catches_a_collective(tmp_path):
    """The check above is not vacuous: it flags both spellings of a collective call."""
    code = "import torch\nimport torch.distributed as dist\ntorch.distributed.all_reduce(x)\n"
    found = [what for _, what in _distributed_uses(ast.parse(code))]
    assert "torch.distributed" in found and "torch.distributed.all_reduce" in found
