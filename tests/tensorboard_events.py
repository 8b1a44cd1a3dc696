"""The scalars of a run's TensorBoard event files, read without TensorBoard itself (for the tests)."""
from __future__ import annotations

import glob
import os
import struct
from typing import Dict, List, Tuple


def event_scalars(log_dir: str) -> Dict[str, List[Tuple[int, float]]]:
    """Each tag's ``(step, value)`` pairs in the tensorboardX event files in ``log_dir``, in file order (TFRecord
    framing: length, its crc, the serialized Event, its crc)."""
    from tensorboardX.proto import event_pb2

    scalars: Dict[str, List[Tuple[int, float]]] = {}
    for path in sorted(glob.glob(os.path.join(log_dir, "events.out.tfevents*"))):
        data = open(path, "rb").read()
        pos = 0
        while pos < len(data):
            (length,) = struct.unpack("<Q", data[pos:pos + 8])
            event = event_pb2.Event.FromString(data[pos + 12:pos + 12 + length])
            pos += 12 + length + 4
            for value in event.summary.value:
                scalars.setdefault(value.tag, []).append((event.step, value.simple_value))
    return scalars
