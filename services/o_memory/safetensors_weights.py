"""The tensors of a `.safetensors` file, without copying them into the process.

The format: an 8-byte little-endian header length, a JSON header naming each tensor's
dtype, shape and byte range, then the raw little-endian data. The `safetensors` package's
numpy API (`safetensors.numpy.load_file`) copies every tensor into the process: 90 MB of
resident memory for all-MiniLM-L6-v2. Here a tensor is either a read-only numpy view on
one memory map of the file (`tensor`: the pages are the page cache's, clean and shared, and
resident once touched), or left in the file and read a row at a time with pread (`rows`:
for an embedding table, of which a text needs only its own tokens' rows; through a map,
each row read would keep a 4 KB page resident, and over time most of the 47 MB table).
That is what keeps the memory service under the 150 MB that issue 16 asks for.
"""

from __future__ import annotations

import json
import mmap
import os
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import numpy as np

# The safetensors dtypes this reader accepts (the format's names).
DTYPES = {"F32": np.float32, "F16": np.float16, "I64": np.int64, "I32": np.int32}
MAX_HEADER = 100 * 1024 * 1024  # the format's own bound on the JSON header


class WeightsError(ValueError):
    """The file is not a safetensors file whose tensors this reader can take."""


@dataclass(frozen=True)
class Entry:
    dtype: np.dtype[Any]
    shape: tuple[int, ...]
    offset: int  # from the start of the file


class FileRows:
    """A 2-d tensor left in the file; `table[ids]` reads the rows `ids` name."""

    def __init__(self, file: IO[bytes], entry: Entry) -> None:
        self._file, self.entry = file, entry  # the file stays open while this lives
        self.shape = entry.shape
        self._row_bytes = entry.shape[1] * entry.dtype.itemsize

    def __getitem__(self, ids: np.ndarray) -> np.ndarray:
        unique, inverse = np.unique(ids, return_inverse=True)
        if unique.size and (unique[0] < 0 or unique[-1] >= self.shape[0]):
            raise IndexError(f"row ids outside 0..{self.shape[0] - 1}")
        rows = np.empty((unique.size, self.shape[1]), dtype=self.entry.dtype)
        for k, i in enumerate(unique.tolist()):
            # pread: no shared file position, so threads may read at once.
            raw = os.pread(
                self._file.fileno(), self._row_bytes, self.entry.offset + i * self._row_bytes
            )
            rows[k] = np.frombuffer(raw, dtype=self.entry.dtype)
        out: np.ndarray = rows[inverse.reshape(-1)].reshape(*np.shape(ids), self.shape[1])
        return out


class Checkpoint:
    """An open safetensors file (kept open, and mapped, as long as this object lives)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._file = path.open("rb")
        self._map = mmap.mmap(self._file.fileno(), 0, access=mmap.ACCESS_READ)
        self.entries = _entries(path, self._map)

    def tensor(self, name: str) -> np.ndarray:
        """The tensor as a read-only view on the file's map."""
        e = self._entry(name)
        count = int(np.prod(e.shape)) if e.shape else 1
        view = np.frombuffer(self._map, dtype=e.dtype, count=count, offset=e.offset)
        return view.reshape(e.shape)

    def rows(self, name: str) -> FileRows:
        """A 2-d tensor read from the file a row at a time, never mapped."""
        e = self._entry(name)
        if len(e.shape) != 2:
            raise WeightsError(f"{self.path}: {name} is not 2-d")
        return FileRows(self._file, e)

    def _entry(self, name: str) -> Entry:
        if name not in self.entries:
            raise WeightsError(f"{self.path}: no tensor {name}")
        return self.entries[name]


def _entries(path: Path, data: mmap.mmap) -> dict[str, Entry]:
    if len(data) < 8:
        raise WeightsError(f"{path}: too short for a safetensors file")
    (size,) = struct.unpack("<Q", data[:8])
    if size > min(MAX_HEADER, len(data) - 8):
        raise WeightsError(f"{path}: header of {size} bytes does not fit the file")
    header = json.loads(data[8 : 8 + size])
    start = 8 + size
    entries: dict[str, Entry] = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        if info["dtype"] not in DTYPES:
            raise WeightsError(f"{path}: {name} has unsupported dtype {info['dtype']}")
        dtype = np.dtype(DTYPES[info["dtype"]]).newbyteorder("<")
        begin, end = info["data_offsets"]
        shape = tuple(int(n) for n in info["shape"])
        count = int(np.prod(shape)) if shape else 1
        if end - begin != count * dtype.itemsize or start + end > len(data):
            raise WeightsError(f"{path}: {name}'s byte range does not match its shape")
        entries[name] = Entry(dtype, shape, start + begin)
    return entries
