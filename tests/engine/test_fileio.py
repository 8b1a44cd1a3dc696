"""Run files are written atomically with the mode a plain ``open()`` gives (group-readable under the usual
umask), not the 0600 of the temporary file they are written through."""
from __future__ import annotations

import os
import stat

from engine.fileio import atomic_write, atomic_write_json


def test_run_files_get_the_mode_open_would_give(tmp_path):
    mask = os.umask(0)
    os.umask(mask)
    atomic_write(str(tmp_path / "ckpt.pth.tar"), lambda f: f.write(b"x"))
    atomic_write_json(str(tmp_path / "summary.json"), {"a": 1})
    for name in ("ckpt.pth.tar", "summary.json"):
        mode = stat.S_IMODE(os.stat(tmp_path / name).st_mode)
        assert mode == 0o666 & ~mask, oct(mode)
    if not mask & 0o040:
        assert stat.S_IMODE(os.stat(tmp_path / "summary.json").st_mode) & stat.S_IRGRP
