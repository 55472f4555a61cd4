"""What parent and children exchange: one JSON object per line, and arrays as raw files.

No pickle crosses a process boundary: a child's answers are data, never code.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from ..dtypes import DTYPES

if TYPE_CHECKING:
    import numpy as np

# numpy is imported where arrays are read or written, so that the protocol alone (the static stages spawn
# children too) needs no numpy.


def send(stream: IO[str], message: dict[str, Any]) -> None:
    stream.write(json.dumps(message) + "\n")
    stream.flush()


def receive(stream: IO[str]) -> dict[str, Any] | None:
    """The next message, or None at end of stream."""
    line = stream.readline()
    if not line:
        return None
    message = json.loads(line)
    if not isinstance(message, dict):
        raise ValueError(f"expected a JSON object, got {line[:200]!r}")
    return message


def save(path: Path, array: np.ndarray) -> None:
    import numpy as np

    path.parent.mkdir(parents=True, exist_ok=True)
    np.ascontiguousarray(array).tofile(path)


def load(path: Path, dtype: str, shape: tuple[int, ...]) -> np.ndarray:
    """A raw array file as written by `save`, mapped read-only (outputs and references of a shape reach
    hundreds of MB: the comparison then reads them a chunk at a time); the size must match the shape exactly."""
    import numpy as np

    expected = int(np.prod(shape)) * DTYPES[dtype].itemsize
    actual = path.stat().st_size
    if actual != expected:
        raise ValueError(f"{path}: {actual} bytes, expected {expected} for {dtype}{list(shape)}")
    array: np.ndarray = np.memmap(path, dtype=np.dtype(DTYPES[dtype].stored), mode="r", shape=shape)
    return array


def bf16_to_float(bits: np.ndarray) -> np.ndarray:
    import numpy as np

    return (bits.astype(np.uint32) << 16).view(np.float32)


def as_float(array: np.ndarray, dtype: str) -> np.ndarray:
    """Stored values as float32 (bf16 from its bits)."""
    import numpy as np

    return bf16_to_float(array) if dtype == "bf16" else array.astype(np.float32)
