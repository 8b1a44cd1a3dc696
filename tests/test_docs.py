"""The docs' examples run as written; the import rules of docs/architecture.md hold."""
from __future__ import annotations

import ast
import os
import re

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOCS = [os.path.join(ROOT, "docs", name) for name in sorted(os.listdir(os.path.join(ROOT, "docs")))
        if name.endswith(".md")]


def _python_blocks(path):
    text = open(path, encoding="utf-8").read()
    return re.findall(r"```python\n(.*?)```", text, flags=re.S)


# docs/distributed.md's examples need launchers or a shared filesystem: the spawn one runs below as a
# script, the file:// one is not runnable as written (it waits for a second process)
EXAMPLES = [(os.path.basename(p), i, code) for p in DOCS + [os.path.join(ROOT, "README.md")]
            if not p.endswith("distributed.md") for i, code in enumerate(_python_blocks(p))]


@pytest.mark.parametrize("name,index,code", EXAMPLES, ids=[f"{n}-{i}" for n, i, _ in EXAMPLES])
def test_docs_example_runs(name, index, code, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    exec(compile(code, f"{name}[{index}]", "exec"), {"__name__": "__docs__"})


def test_docs_have_examples():
    assert len([e for e in EXAMPLES if e[0] == "middleware.md"]) >= 6


def _imports(path):
    tree = ast.parse(open(path, encoding="utf-8").read())
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name.split(".")[0], node
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield node.module.split(".")[0], node


def _py_files(package):
    for dirpath, _, files in os.walk(os.path.join(ROOT, package)):
        for f in files:
            if f.endswith(".py"):
                yield os.path.join(dirpath, f)


@pytest.mark.parametrize("package,forbidden", [
    ("engine", {"middleware", "policies", "dizoo"}),
    ("middleware", {"policies", "dizoo"}),
    ("policies", {"middleware", "dizoo"}),
])
def test_import_direction(package, forbidden):
    for path in _py_files(package):
        rel = os.path.relpath(path, ROOT)
        if rel.startswith(os.path.join("engine", "entry")) or rel == os.path.join("engine", "cli.py"):
            continue  # the top floor composes the others
        for top, node in _imports(path):
            assert top not in forbidden, f"{rel}:{node.lineno} imports {top}"


def test_distributed_doc_launch_example_runs(tmp_path, monkeypatch):
    """docs/distributed.md's engine.launch example, run as a script (spawn needs an importable module)."""
    import subprocess
    import sys
    code = _python_blocks(os.path.join(ROOT, "docs", "distributed.md"))[0]
    script = tmp_path / "launch_example.py"
    script.write_text(code)
    proc = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert (tmp_path / "total.txt").read_text() == "3.0"
