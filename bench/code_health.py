"""The renovation's figures (issue 30), from the code as it stands: library lines per package, files over
450 lines, import circles among the library's modules, underscore members of the ``Policy`` base used by
algorithm files, ``isinstance`` branches on an observation's type in policies, and blocks of six or more
code lines repeated between library files (through the ``duplicates`` tool, when it is on the PATH).

    python bench/code_health.py             # this checkout
    python bench/code_health.py --root DIR  # another (e.g. a worktree of an older commit)

Nothing is imported: the files are read and parsed (``ast``), so it runs on any checkout, fast.
"""
from __future__ import annotations

import argparse
import ast
import os
import re
import shutil
import subprocess
from typing import Dict, Iterator, List, Set, Tuple

LIBRARY = ("engine", "data", "middleware", "policies", "pipelines", "commands")
LONG_FILE = 450


def python_files(root: str, package: str) -> Iterator[str]:
    for dirpath, _, names in os.walk(os.path.join(root, package)):
        for name in sorted(names):
            if name.endswith(".py"):
                yield os.path.join(dirpath, name)


def module_name(root: str, path: str) -> str:
    rel = os.path.relpath(path, root)[:-3].replace(os.sep, ".")
    return rel[: -len(".__init__")] if rel.endswith(".__init__") else rel


def line_count(path: str) -> int:
    with open(path, encoding="utf-8") as f:
        return sum(1 for _ in f)


def imports_of(root: str, path: str, modules: Set[str]) -> Set[str]:
    """The library modules ``path`` imports, at any depth (deferred imports too), relative ones resolved."""
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read(), filename=path)
    me = module_name(root, path)
    package = me if path.endswith("__init__.py") else me.rpartition(".")[0]
    found: Set[str] = set()
    for node in _runtime_nodes(tree):
        names: List[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                parent = ".".join(parts[: len(parts) - node.level + 1])
                base = f"{parent}.{base}" if base else parent
            names = [base] + [f"{base}.{alias.name}" for alias in node.names]
        for name in names:
            while name and name not in modules:  # the longest library module it names
                name = name.rpartition(".")[0]
            if name and name != me and not me.startswith(name + "."):  # a package's own __init__ is not a circle
                found.add(name)
    return found


def _runtime_nodes(tree: ast.AST) -> Iterator[ast.AST]:
    """Every node, as ``ast.walk`` gives them, but those under ``if TYPE_CHECKING:`` (imports for type hints
    only, which never run and tie no circle)."""
    stack = [tree]
    while stack:
        node = stack.pop()
        yield node
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and getattr(child.test, "id", getattr(child.test, "attr", "")) == "TYPE_CHECKING":
                stack.extend(child.orelse)
                continue
            stack.append(child)


def circles(graph: Dict[str, Set[str]]) -> List[List[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: Dict[str, int] = {}
    low: Dict[str, int] = {}
    stack: List[str] = []
    on_stack: Set[str] = set()
    found: List[List[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in graph.get(node, ()):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def base_private_members(root: str) -> Set[str]:
    """Underscore names the ``Policy`` class of ``policies/base.py`` defines: its methods and the attributes
    its methods assign on ``self``."""
    path = os.path.join(root, "policies", "base.py")
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read())
    names: Set[str] = set()
    for cls in (n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Policy"):
        for item in cls.body:
            if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                names.add(item.name)
            elif isinstance(item, (ast.Assign, ast.AnnAssign)):
                targets = item.targets if isinstance(item, ast.Assign) else [item.target]
                names.update(t.id for t in targets if isinstance(t, ast.Name))
        for node in ast.walk(cls):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self":
                names.add(node.attr)
    return {n for n in names if n.startswith("_") and not n.startswith("__")}


def base_member_uses(root: str) -> Tuple[int, int, Dict[str, int]]:
    """Uses of the base's underscore members (``self._x``) in the algorithm files of ``policies/``: every
    use, the distinct (member, file) pairs, and the uses per file."""
    members = base_private_members(root)
    per_file: Dict[str, int] = {}
    pairs = 0
    for path in python_files(root, "policies"):
        if os.path.basename(path) == "base.py":
            continue
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read())
        if not any(isinstance(n, ast.ClassDef) and any(getattr(b, "id", getattr(b, "attr", "")).endswith("Policy")
                                                        for b in n.bases) for n in tree.body):
            continue  # not an algorithm file
        used = [node.attr for node in ast.walk(tree) if isinstance(node, ast.Attribute) and node.attr in members
                and isinstance(node.value, ast.Name) and node.value.id == "self"]
        if used:
            per_file[os.path.relpath(path, root)] = len(used)
            pairs += len(set(used))
    return sum(per_file.values()), pairs, per_file


OBS_TYPE_BRANCH = re.compile(r"isinstance\(\s*(?:obs|observation|x)\w*\s*,\s*\(?\s*(?:torch\.Tensor|np\.ndarray)")


def obs_type_branches(root: str) -> int:
    count = 0
    for path in python_files(root, "policies"):
        with open(path, encoding="utf-8") as f:
            count += len(OBS_TYPE_BRANCH.findall(f.read()))
    return count


def repeated_blocks(root: str) -> str:
    """Pairs of library files sharing six or more code lines (``duplicates``), or why not counted."""
    tool = shutil.which("duplicates")
    if tool is None:
        return "not counted (the duplicates tool is not on the PATH)"
    out = subprocess.run([tool, "--repo", root, "--most", "200", "--seconds", "60"], capture_output=True,
                         text=True, check=False).stdout
    rows = [line for line in out.splitlines() if re.match(r"\s*D\d+ ", line)]
    files = [[side.strip().split(" ")[0].split(":")[0] for side in row.split(" ", 1)[1].split(" ~ ")[:2]]
             for row in rows]
    library = [pair for pair in files if all(path.split("/")[0] in LIBRARY for path in pair)]
    between = [pair for pair in library if pair[0] != pair[1]]
    return (f"{len(between)} between two files, {len(library) - len(between)} within one "
            f"(of {len(rows)} pairs in the whole tree)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", default=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    parser.add_argument("--no-duplicates", action="store_true", help="skip the repeated-block count")
    args = parser.parse_args()
    root = os.path.abspath(args.root)
    files = {pkg: list(python_files(root, pkg)) for pkg in LIBRARY + ("dizoo",) if os.path.isdir(os.path.join(root, pkg))}
    print("library lines per package:")
    for pkg, paths in files.items():
        print(f"  {pkg:11s} {sum(line_count(p) for p in paths):6,d} lines in {len(paths)} files")
    lib_paths = [p for pkg, paths in files.items() if pkg in LIBRARY for p in paths]
    long = sorted((line_count(p), os.path.relpath(p, root)) for p in lib_paths if line_count(p) > LONG_FILE)
    print(f"files over {LONG_FILE} lines: {len(long)}" + "".join(f"\n  {path} {n}" for n, path in long))
    modules = {module_name(root, p) for p in lib_paths}
    graph = {module_name(root, p): imports_of(root, p, modules) for p in lib_paths}
    found = circles(graph)
    print(f"import circles among library modules: {len(found)}" + "".join(f"\n  {' <-> '.join(c)}" for c in found))
    total, pairs, per_file = base_member_uses(root)
    print(f"underscore members of the Policy base used by algorithm files: {total} uses ({pairs} distinct members "
          f"per file) in {len(per_file)} files"
          + "".join(f"\n  {path} {n}" for path, n in sorted(per_file.items())))
    print(f"isinstance branches on an observation's type in policies: {obs_type_branches(root)}")
    if not args.no_duplicates:
        print(f"blocks of 6+ code lines repeated in library files: {repeated_blocks(root)}")


if __name__ == "__main__":
    main()
