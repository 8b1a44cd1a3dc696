"""bench/envpool_slim.py: the Atari-only EnvPool tree carried to the device machine keeps EnvPool's Python, the
Atari module and its libraries and the ROMs, leaves the other families' modules and assets out, and registers
Atari alone (each other family's package would import a compiled module the tree lacks)."""
from __future__ import annotations

import os
import subprocess
import sys
import zipfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

ENVPOOL_FILES = {
    "envpool/__init__.py": "import envpool.entry  # noqa: F401\n",
    "envpool/entry.py": "import envpool.atari.registration\nimport envpool.mujoco.gym.registration\n",
    "envpool/atari/__init__.py": "",
    "envpool/atari/registration.py": "REGISTERED = 'atari'\n",
    "envpool/atari/atari_envpool.so": "\0binary",
    "envpool/mujoco/gym/registration.py": "raise ImportError('its compiled module is not here')\n",
    "envpool/mujoco/mujoco_gym_envpool.so": "\0binary",
    "envpool/vizdoom/bin/vizdoom": "\0binary",
    "envpool.libs/libOpenGL-4c5f8d52.so.0.0.0": "\0binary",
    "envpool-1.2.5.dist-info/RECORD": "",
}
ASSET_FILES = {
    "envpool_assets/__init__.py": "",
    "envpool_assets/atari/roms/pong.bin": "\0rom",
    "envpool_assets/mujoco/assets_gym/half_cheetah.xml": "<mujoco/>",
    "envpool_assets/procgen/assets/a.png": "\0png",
}


def _wheel(path, files):
    with zipfile.ZipFile(path, "w") as archive:
        for name, text in files.items():
            archive.writestr(name, text)
    return str(path)


def test_the_tree_holds_atari_alone_and_imports(tmp_path):
    envpool = _wheel(tmp_path / "envpool-1.2.5-cp312-cp312-manylinux_2_28_x86_64.whl", ENVPOOL_FILES)
    assets = _wheel(tmp_path / "envpool_assets-0.3.0-py3-none-any.whl", ASSET_FILES)
    out = tmp_path / "slim"
    done = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "envpool_slim.py"), envpool, assets,
                           "--out", str(out)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    kept = {os.path.relpath(os.path.join(root, f), out).replace(os.sep, "/")
            for root, _, files in os.walk(out) for f in files}
    assert kept == {"envpool/__init__.py", "envpool/entry.py", "envpool/atari/__init__.py",
                    "envpool/atari/registration.py", "envpool/atari/atari_envpool.so",
                    "envpool/mujoco/gym/registration.py", "envpool.libs/libOpenGL-4c5f8d52.so.0.0.0",
                    "envpool_assets/__init__.py", "envpool_assets/atari/roms/pong.bin"}
    imported = subprocess.run([sys.executable, "-c", "import envpool.atari.registration as r, envpool.entry; "
                               "print(r.REGISTERED)"], capture_output=True, text=True, cwd=out,
                              env=dict(os.environ, PYTHONPATH=str(out)))
    assert imported.returncode == 0 and imported.stdout.strip() == "atari", imported.stderr


def test_wheels_given_in_the_wrong_order_are_named(tmp_path):
    envpool = _wheel(tmp_path / "envpool-1.2.5-cp312-cp312-manylinux_2_28_x86_64.whl", ENVPOOL_FILES)
    assets = _wheel(tmp_path / "envpool_assets-0.3.0-py3-none-any.whl", ASSET_FILES)
    done = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "envpool_slim.py"), assets, envpool,
                           "--out", str(tmp_path / "slim")], capture_output=True, text=True)
    assert done.returncode == 2 and "the order is: EnvPool's wheel, then its assets' wheel" in done.stderr
