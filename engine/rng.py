"""The process's random number generators (python ``random``, numpy's global one, torch's CPU one) as plain
data a checkpoint can hold, so a resumed run draws what the uninterrupted one would have.

Tensors, ints and tuples only: checkpoints load with ``torch.load(weights_only=True)``, which reads no
numpy arrays.
"""
from __future__ import annotations

import random
from typing import Any, Dict

import numpy as np
import torch

__all__ = ["rng_state", "set_rng_state"]


def rng_state() -> Dict[str, Any]:
    name, keys, pos, has_gauss, cached = np.random.get_state()
    return {"python": random.getstate(), "torch": torch.get_rng_state(),
            "numpy": (name, torch.from_numpy(keys.astype(np.int64)), int(pos), int(has_gauss), float(cached))}


def set_rng_state(state: Dict[str, Any]) -> None:
    """Restore what ``rng_state`` returned."""
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    torch.set_rng_state(state["torch"])
    name, keys, pos, has_gauss, cached = state["numpy"]
    np.random.set_state((name, keys.numpy().astype(np.uint32), pos, has_gauss, cached))
