"""The local all-MiniLM-L6-v2 (o_memory/minilm.py): the float32 model's similarities, unit
384-d vectors, the same vector for a text alone or in any batch, and its parts."""

from __future__ import annotations

import math

import numpy as np
import pytest

from o_memory.embeddings import LOCAL_DIM, local_embedder
from o_memory.minilm import MAX_BATCH_CELLS, MAX_BATCH_TEXTS, batches, erf

SENTENCES = [
    "A cat is sitting on the mat.",
    "A kitten rests on a rug.",
    "The stock market fell sharply today.",
    "Share prices dropped on Wall Street.",
    "How do I bake sourdough bread?",
]
# Cosines of the pairs above from the same weights run by sentence-transformers and torch
# (the embedder O used before, 2026-11-24), to 4 decimals; the numpy forward pass gives
# them to float32 rounding.
FLOAT32_COSINES = {(0, 1): 0.6526, (2, 3): 0.5906, (0, 2): 0.0823, (1, 3): 0.0659, (1, 4): -0.0022}


@pytest.fixture(scope="module")
def vectors() -> np.ndarray:
    return np.array(local_embedder().embed_sync(SENTENCES))


def test_vectors_are_384_dimensional_and_unit_length(vectors: np.ndarray) -> None:
    assert LOCAL_DIM == 384
    assert vectors.shape == (5, 384)
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)


def test_paraphrases_are_nearer_than_other_topics(vectors: np.ndarray) -> None:
    cos = vectors @ vectors.T
    for i, j, k in [(0, 1, 2), (0, 1, 3), (0, 1, 4), (2, 3, 0), (2, 3, 1), (2, 3, 4)]:
        assert cos[i, j] > cos[i, k] + 0.4, (i, j, k)
    assert [int(i) for i in np.argsort(-cos[0])] == [0, 1, 4, 2, 3]


def test_similarities_match_the_float32_model(vectors: np.ndarray) -> None:
    cos = vectors @ vectors.T
    for (i, j), expected in FLOAT32_COSINES.items():
        assert abs(float(cos[i, j]) - expected) < 0.001, (i, j, float(cos[i, j]))


def test_a_text_gets_the_same_vector_alone_and_padded_in_a_batch() -> None:
    long = " ".join(f"word{i}" for i in range(300))  # cut at 256 tokens
    alone = np.array(local_embedder().embed_sync([SENTENCES[1]]))[0]
    batch = np.array(local_embedder().embed_sync([long, SENTENCES[1], "short", long]))
    assert np.allclose(batch[1], alone, atol=1e-5)
    assert np.allclose(batch[0], batch[3], atol=1e-5)


def test_no_texts_give_no_vectors() -> None:
    assert local_embedder().embed_sync([]) == []


def test_batches_keep_every_text_once_and_stay_within_bounds() -> None:
    lengths = [3, 256, 40, 12, 12, 200, *([8] * 150)]
    groups = batches(lengths)
    assert sorted(i for g in groups for i in g) == list(range(len(lengths)))
    for g in groups:
        assert len(g) <= MAX_BATCH_TEXTS
        assert len(g) == 1 or len(g) * max(lengths[i] for i in g) ** 2 <= MAX_BATCH_CELLS
    assert [lengths[i] for i in groups[-1]] == [256]


def test_erf_is_within_float32_precision_of_the_exact_one() -> None:
    xs = np.linspace(-6, 6, 2001, dtype=np.float64)
    worst = max(abs(float(erf(np.array(x))) - math.erf(x)) for x in xs)
    assert worst < 2e-7
