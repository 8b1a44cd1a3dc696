"""Every shell command in README.md and docs/ runs as written (the ```bash blocks).

Each block runs as one bash script, all in one directory that sees the repository's ``dizoo/`` (commands
name configs by their path from the repository root) and in the order of the pages, with the test's Python
environment first on PATH. The pages come in two groups, each a test file of its own so that pytest-xdist runs
them side by side, each in its own directory: this file, the pages that build on each other (the README trains
the runs and datasets that docs/after_training.md and docs/offline.md use), and
``test_doc_commands_pages.py``, the pages that stand alone. A command given on several pages runs once, on
the first page that gives it (in the order README.md, then docs/ by name), which the text alone decides.
Not run here, each for a stated reason:

- the README's fresh-machine lines: the venv and the install are what ``.ci/run`` does before it runs the
  suite; the training part runs here;
- the test commands (``python -m pytest ...``): the suite itself, which ``.ci/run`` runs;
- lines with ``--gpus``: run by ``pytest -m gpu`` on a machine with GPUs, skipped without CUDA;
- lines with placeholders (``HOST0``, ``CONFIG``): templates, e.g. for several machines; the same launches
  are simulated on one machine in tests/pipelines/test_launch.py.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FILES = [os.path.join(ROOT, "README.md")] + sorted(
    os.path.join(ROOT, "docs", name) for name in os.listdir(os.path.join(ROOT, "docs")) if name.endswith(".md"))
#: the pages whose commands use what an earlier page's made (the rest: test_doc_commands_pages.py)
CHAINED = {"README.md", os.path.join("docs", "after_training.md"), os.path.join("docs", "offline.md")}
SETUP = re.compile(r"^python3 -m venv .*?&& pip install [^&]*&& ")
TEMPLATE = re.compile(r"\bHOST0\b|\bCONFIG\b")


def _blocks():
    for path in FILES:
        text = open(path, encoding="utf-8").read()
        for i, block in enumerate(re.findall(r"```bash\n(.*?)```", text, flags=re.S)):
            yield f"{os.path.relpath(path, ROOT)}-{i}", block


def _command(line: str) -> str:
    """A line without its comment and spacing: the same command on two pages is one command."""
    return " ".join(line.split("#", 1)[0].split())


def _lines(block: str) -> list:
    return block.replace("\\\n", " ").splitlines()


def _script(block: str, gpus: bool, earlier: set):
    """The block as it runs here: the fresh-machine setup left to CI, --gpus lines only with GPUs, a line
    an earlier block gives (``earlier``: their commands) left out."""
    lines, left_out = [], []
    for line in _lines(block):
        if _command(line) and _command(line) in earlier:
            left_out.append(f"ran already: {line}")
            continue
        line = SETUP.sub("", line)
        if line.startswith("python -m pytest"):  # .ci/run runs the suite; a subset of it runs here anyway
            left_out.append(line)
            continue
        if TEMPLATE.search(line) or ("--gpus" in line and not gpus):
            left_out.append(line)
            continue
        lines.append(line)
    return "\n".join(lines), left_out


def _with_earlier(blocks):
    """Each block with the commands of the blocks before it (in page order)."""
    seen: set = set()
    for name, block in blocks:
        yield name, block, frozenset(seen)
        seen.update(_command(line) for line in _lines(block) if _command(line))


ALL_BLOCKS = list(_with_earlier(_blocks()))
BLOCKS = [b for b in ALL_BLOCKS if b[0].rsplit("-", 1)[0] in CHAINED]


def make_workdir(tmp_path_factory, name: str):
    """A directory that sees the repository's ``dizoo/`` and has the ``docs/img`` the README writes to, and the
    files the pages tell the reader to save: a ```python block whose first line is ``# NAME.py``
    (docs/own_algorithm.md's algorithm and config, which its commands train)."""
    path = tmp_path_factory.mktemp(name)
    os.symlink(os.path.join(ROOT, "dizoo"), path / "dizoo")
    os.makedirs(path / "docs" / "img")
    for page in FILES:
        for file_name, code in re.findall(r"```python\n# ([\w.]+\.py)\n(.*?)```", open(page, encoding="utf-8").read(),
                                          flags=re.S):
            (path / file_name).write_text(code)
    return path


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    """One directory for all blocks, as a reader following the pages in order has: a later block may use
    what an earlier one made (the recording reads the checkpoint of a run the README trained)."""
    return make_workdir(tmp_path_factory, "docs_commands")


def run_block(name, block, earlier, workdir):
    """Run one block as written (``_script``) in ``workdir``; skip a block with nothing to run here."""
    script, left_out = _script(block, gpus=torch.cuda.is_available(), earlier=earlier)
    if not script.strip("# \n"):
        pytest.skip(f"nothing to run here: {left_out}")
    env = dict(os.environ, PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""),
               OMP_NUM_THREADS="1", BATON_DDP_TIMEOUT="60", PYTHONPATH=ROOT)
    proc = subprocess.run(["bash", "-e", "-o", "pipefail", "-c", script], cwd=workdir, env=env,
                          capture_output=True, text=True, timeout=540)
    assert proc.returncode == 0, f"{name} failed:\n{script}\n--- stderr ---\n{proc.stderr[-4000:]}"


@pytest.mark.distributed
@pytest.mark.timeout(600)
@pytest.mark.parametrize("name,block,earlier", BLOCKS, ids=[b[0] for b in BLOCKS])
def test_documented_commands_run_as_written(name, block, earlier, workdir):
    run_block(name, block, earlier, workdir)


def test_every_documented_block_is_seen():
    """The blocks above are the README's and the docs' (a renamed fence would silently drop one)."""
    names = {name.rsplit("-", 1)[0] for name, _, _ in ALL_BLOCKS}
    assert {"README.md", os.path.join("docs", "distributed.md")} <= names
