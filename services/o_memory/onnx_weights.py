"""The weight tensors and nodes of an ONNX file, read without the `onnx` package.

An ONNX model is a protobuf `ModelProto`; its graph's initializers are `TensorProto`s.
Only what naming the weights needs is decoded (initializers' dims, data type, name and raw
data; nodes' operator, inputs and outputs); the tensors
are numpy views on one read-only memory map of the file, so nothing is copied and the
pages are the page cache's (clean, shared, droppable). The layout is protobuf's wire
format (varints and length-delimited fields), stable since ONNX 1.0.
"""

from __future__ import annotations

import mmap
from dataclasses import dataclass
from pathlib import Path

import numpy as np

# TensorProto.DataType values this reader accepts.
DTYPES = {1: np.float32, 3: np.int8, 6: np.int32, 7: np.int64, 9: np.bool_}
MODEL_GRAPH, GRAPH_NODE, GRAPH_INITIALIZER = 7, 1, 5
NODE_INPUT, NODE_OUTPUT, NODE_OP_TYPE = 1, 2, 4
TENSOR_DIMS, TENSOR_DATA_TYPE, TENSOR_NAME, TENSOR_RAW_DATA = 1, 2, 8, 9


class WeightsError(ValueError):
    """The file is not an ONNX model whose initializers this reader can take."""


def _varint(buf: memoryview, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = buf[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
        shift += 7


def _fields(buf: memoryview, start: int, end: int) -> list[tuple[int, int, int, int]]:
    """(field number, wire type, value or offset, length) for each field in buf[start:end]."""
    out = []
    pos = start
    while pos < end:
        key, pos = _varint(buf, pos)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = _varint(buf, pos)
            out.append((number, wire, value, 0))
        elif wire == 2:
            length, pos = _varint(buf, pos)
            out.append((number, wire, pos, length))
            pos += length
        elif wire == 5:
            out.append((number, wire, pos, 4))
            pos += 4
        elif wire == 1:
            out.append((number, wire, pos, 8))
            pos += 8
        else:
            raise WeightsError(f"unsupported protobuf wire type {wire}")
    if pos != end:
        raise WeightsError("truncated protobuf message")
    return out


def _tensor(buf: memoryview, start: int, end: int) -> tuple[str, np.ndarray]:
    dims: list[int] = []
    dtype = name = None
    raw: tuple[int, int] | None = None
    for number, wire, value, length in _fields(buf, start, end):
        if number == TENSOR_DIMS and wire == 0:
            dims.append(value)
        elif number == TENSOR_DIMS and wire == 2:  # packed
            pos = value
            while pos < value + length:
                dim, pos = _varint(buf, pos)
                dims.append(dim)
        elif number == TENSOR_DATA_TYPE:
            dtype = DTYPES.get(value)
            if dtype is None:
                raise WeightsError(f"unsupported tensor data type {value}")
        elif number == TENSOR_NAME:
            name = bytes(buf[value : value + length]).decode()
        elif number == TENSOR_RAW_DATA:
            raw = (value, length)
    if name is None or dtype is None or raw is None:
        raise WeightsError(f"initializer {name!r} has no name, type or raw data")
    count = int(np.prod(dims, dtype=np.int64)) if dims else 1
    array: np.ndarray = np.frombuffer(buf, dtype=dtype, count=count, offset=raw[0])
    if array.nbytes != raw[1]:
        raise WeightsError(f"initializer {name}: {raw[1]} bytes for shape {dims}")
    return name, array.reshape(dims)


@dataclass(frozen=True)
class Node:
    op_type: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]


@dataclass(frozen=True)
class Graph:
    """A model's initializers by name (read-only arrays) and its nodes in file order."""

    initializers: dict[str, np.ndarray]
    nodes: list[Node]


def _node(buf: memoryview, start: int, end: int) -> Node:
    fields = _fields(buf, start, end)

    def strings(number: int) -> tuple[str, ...]:
        return tuple(bytes(buf[v : v + n]).decode() for f, _, v, n in fields if f == number)

    return Node((strings(NODE_OP_TYPE) or ("",))[0], strings(NODE_INPUT), strings(NODE_OUTPUT))


def read_graph(path: Path) -> Graph:
    """The initializers and nodes of the ONNX model at `path`."""
    with path.open("rb") as f:
        mapped = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    buf = memoryview(mapped)
    graphs = [(v, n) for number, wire, v, n in _fields(buf, 0, len(buf)) if number == MODEL_GRAPH]
    if len(graphs) != 1:
        raise WeightsError(f"{path}: expected one graph, found {len(graphs)}")
    start, length = graphs[0]
    fields = [(f, v, n) for f, wire, v, n in _fields(buf, start, start + length) if wire == 2]
    return Graph(
        initializers=dict(_tensor(buf, v, v + n) for f, v, n in fields if f == GRAPH_INITIALIZER),
        nodes=[_node(buf, v, v + n) for f, v, n in fields if f == GRAPH_NODE],
    )
