"""The tensors of a `.safetensors` file as read-only numpy views on a memory map.

The format: an 8-byte little-endian header length, a JSON header naming each tensor's
dtype, shape and byte range, then the raw little-endian data. The `safetensors` package's
numpy API (`safetensors.numpy.load_file`) copies every tensor into the process (90 MB for
all-MiniLM-L6-v2); views on one memory map copy nothing, and the pages are the page
cache's: clean, shared between processes, and only read in when used. That matters for
the word embeddings (47 of the 90 MB): a text touches only its own tokens' rows, so the
memory service's resident memory stays under the 150 MB that issue 16 asks for.
"""

from __future__ import annotations

import json
import mmap
import struct
from pathlib import Path

import numpy as np

# The safetensors dtypes this reader accepts (the format's names).
DTYPES = {"F32": np.float32, "F16": np.float16, "I64": np.int64, "I32": np.int32}
MAX_HEADER = 100 * 1024 * 1024  # the format's own bound on the JSON header


class WeightsError(ValueError):
    """The file is not a safetensors file whose tensors this reader can take."""


def read_tensors(path: Path) -> dict[str, np.ndarray]:
    """Every tensor in the file by name, as a read-only view (the map lives as long as they)."""
    with path.open("rb") as f:
        mapped = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    if len(mapped) < 8:
        raise WeightsError(f"{path}: too short for a safetensors file")
    (size,) = struct.unpack("<Q", mapped[:8])
    if size > min(MAX_HEADER, len(mapped) - 8):
        raise WeightsError(f"{path}: header of {size} bytes does not fit the file")
    header = json.loads(mapped[8 : 8 + size])
    start = 8 + size
    tensors: dict[str, np.ndarray] = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        dtype = DTYPES.get(info["dtype"])
        if dtype is None:
            raise WeightsError(f"{path}: {name} has unsupported dtype {info['dtype']}")
        begin, end = info["data_offsets"]
        shape = tuple(info["shape"])
        count = int(np.prod(shape)) if shape else 1
        if end - begin != count * np.dtype(dtype).itemsize or start + end > len(mapped):
            raise WeightsError(f"{path}: {name}'s byte range does not match its shape")
        view = np.frombuffer(
            mapped, dtype=np.dtype(dtype).newbyteorder("<"), count=count, offset=start + begin
        )
        tensors[name] = view.reshape(shape)
    return tensors
