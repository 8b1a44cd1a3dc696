"""The docs' examples run as written."""
from __future__ import annotations

import os
import re
import sys
import types

import pytest

from engine.registry import CONFIG_SECTIONS, POLICY_REGISTRY

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
    # a config section an example registers (docs/middleware.md) stays the example's: later tests in this
    # process compile configs without it
    CONFIG_SECTIONS.names()  # the entry points loaded into the registry the example's copy starts from
    monkeypatch.setattr(CONFIG_SECTIONS, "_items", dict(CONFIG_SECTIONS._items))
    # likewise an algorithm an example registers (docs/own_algorithm.md)
    POLICY_REGISTRY.names()
    monkeypatch.setattr(POLICY_REGISTRY, "_items", dict(POLICY_REGISTRY._items))
    module = types.ModuleType("__docs__")  # a real module: dataclasses defined in an example look theirs up
    monkeypatch.setitem(sys.modules, module.__name__, module)
    exec(compile(code, f"{name}[{index}]", "exec"), module.__dict__)


def test_docs_have_examples():
    assert len([e for e in EXAMPLES if e[0] == "middleware.md"]) >= 6


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


@pytest.mark.distributed
@pytest.mark.timeout(240)
def test_distributed_doc_mp_spawn_recipe_runs(tmp_path):
    """docs/distributed.md's ``torch.multiprocessing.spawn`` recipe, as a script: two spawned ranks train one
    run together."""
    import subprocess
    import sys
    [code] = [c for c in _python_blocks(os.path.join(ROOT, "docs", "distributed.md")) if "mp.spawn(" in c]
    script = tmp_path / "spawn_recipe.py"
    script.write_text(code)
    proc = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=200,
                          env=dict(os.environ, OMP_NUM_THREADS="1", BATON_DDP_TIMEOUT="60"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "2 ranks, " in proc.stdout and (tmp_path / "spawned_run" / "summary.json").is_file()


@pytest.mark.distributed
@pytest.mark.timeout(240)
def test_middleware_doc_synced_field_example_runs_under_torchrun(tmp_path):
    """docs/middleware.md's custom context field and middleware, in the standard pipeline, as a script
    under ``torchrun --nproc_per_node=2``: both ranks must see the field summed over ranks."""
    import subprocess
    import sys
    [code] = [c for c in _python_blocks(os.path.join(ROOT, "docs", "middleware.md")) if "class MyContext" in c]
    script = tmp_path / "my_script.py"
    script.write_text(code)
    env = dict(os.environ, BATON_DDP_TIMEOUT="60", OMP_NUM_THREADS="1")
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
                           str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=200, env=env)
    assert proc.returncode == 0, proc.stderr[-4000:]
    # the two ranks share one pipe, so their lines may interleave: match the reports, not lines
    reports = dict(re.findall(r"rank (\d): (\d+) episodes on all ranks", proc.stdout))
    assert sorted(reports) == ["0", "1"], proc.stdout
    assert reports["0"] == reports["1"], proc.stdout  # the same global count on both ranks
