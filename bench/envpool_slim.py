"""An Atari-only EnvPool tree small enough to carry to the device machine (issue 33, item 2).

EnvPool's wheel (53 MB: every env family's compiled module) and its asset wheel (62 MB: MuJoCo, Procgen, football
and Doom assets beside the Atari ROMs) are more than the device tool carries in one call (64 MiB, the other wheels
included), and that machine has no network. Pong needs three pieces of them: EnvPool's Python files, its Atari
module (``envpool/atari/atari_envpool.so``, 10 MB) with the libraries it links (``envpool.libs``), and the Atari
ROMs. This writes those into one folder to put on ``PYTHONPATH`` there, with EnvPool's ``entry.py`` (which imports
every family's registration, and each family's package loads its compiled module) cut to the Atari registration:
the other families' env ids are then unknown to ``envpool.make``.

Here, with package-index access (EnvPool's Python must match the device's, 3.12)::

    python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \\
        --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 -d /tmp/epw \\
        envpool==1.2.5 envpool-assets==0.3.0 dm-env==1.6 optree==0.20.0
    python bench/envpool_slim.py /tmp/epw/envpool-1.2.5-*.whl /tmp/epw/envpool_assets-0.3.0-*.whl --out .whl/envpool_slim
    cp /tmp/epw/dm_env-*.whl /tmp/epw/optree-*.whl .whl/

There (``bash bench/device_checks.sh envpool``)::

    PYTHONPATH=$PWD/.whl/envpool_slim python3 bench/atari_pong.py --envs 16 --repeats 2
"""
from __future__ import annotations

import argparse
import os
import zipfile
from typing import Callable, Iterable

#: the env family kept; its compiled module is the only one extracted
FAMILY = "atari"


def keep_envpool(name: str) -> bool:
    """EnvPool's files that Atari needs: every Python file and type stub, the Atari module, the linked libraries."""
    if name.endswith("/") or ".dist-info/" in name:
        return False
    if name.startswith("envpool.libs/"):
        return True
    if name.endswith((".py", ".pyi", "py.typed")):
        return True
    return name.startswith(f"envpool/{FAMILY}/")


def keep_assets(name: str) -> bool:
    """The asset package's own module and the Atari ROMs."""
    return name == "envpool_assets/__init__.py" or name.startswith(f"envpool_assets/{FAMILY}/")


def extract(wheel: str, keep: Callable[[str], bool], out: str) -> Iterable[str]:
    """Extract the members of ``wheel`` that ``keep`` takes into ``out``; yield their names."""
    with zipfile.ZipFile(wheel) as archive:
        for info in archive.infolist():
            if not keep(info.filename):
                continue
            archive.extract(info, out)
            path = os.path.join(out, info.filename)
            mode = (info.external_attr >> 16) & 0o777
            if mode:
                os.chmod(path, mode)  # the compiled modules and libraries keep their execute bits
            yield info.filename


def register_only_the_family(out: str) -> None:
    """EnvPool registers every family in ``envpool/entry.py``; each family's package imports its compiled module,
    which this tree lacks: registration is cut to the kept family."""
    with open(os.path.join(out, "envpool", "entry.py"), "w") as f:
        f.write(f"# Entry point: {FAMILY} only (bench/envpool_slim.py left out the other families' modules).\n"
                f"import envpool.{FAMILY}.registration  # noqa: F401\n")


def folder_bytes(path: str) -> int:
    return sum(os.path.getsize(os.path.join(root, f)) for root, _, files in os.walk(path) for f in files)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("envpool_wheel")
    parser.add_argument("assets_wheel")
    parser.add_argument("--out", default=os.path.join(".whl", "envpool_slim"))
    args = parser.parse_args()
    for wheel, prefix in ((args.envpool_wheel, "envpool-"), (args.assets_wheel, "envpool_assets-")):
        if not os.path.basename(wheel).startswith(prefix) or not wheel.endswith(".whl"):
            parser.error(f"{wheel} is not an {prefix}*.whl (the order is: EnvPool's wheel, then its assets' wheel)")
    os.makedirs(args.out, exist_ok=True)
    names = list(extract(args.envpool_wheel, keep_envpool, args.out))
    names += list(extract(args.assets_wheel, keep_assets, args.out))
    if not any(n.endswith(f"{FAMILY}_envpool.so") for n in names):
        raise SystemExit(f"{args.envpool_wheel} holds no envpool/{FAMILY}/{FAMILY}_envpool.so")
    register_only_the_family(args.out)
    print(f"{len(names)} files, {folder_bytes(args.out) / 2**20:.1f} MiB in {args.out}")


if __name__ == "__main__":
    main()
