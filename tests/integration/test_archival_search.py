"""Archival search with the local embedding model against real Postgres + pgvector.

The model loads once per test session (~5 s); each test embeds a handful of texts.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import asyncpg
import pytest

from o_contracts.envelope import Envelope
from o_contracts.events import PassageInserted
from o_contracts.events.archival import ArchivalPassage
from o_contracts.ids import new_id
from o_contracts.vectors import pack_vector
from o_memory import archival
from o_memory.archival_projection import archival as archival_projection
from o_memory.embeddings import LOCAL_DIM, LOCAL_MODEL, LocalEmbedder, local_embedder
from o_memory.stream import StreamSettings
from o_runtime.eventlog import EventLog
from o_runtime.projector import Projector

NOW = datetime(2026, 3, 1, tzinfo=UTC)


@pytest.fixture(scope="session")
def embedder() -> LocalEmbedder:
    model = local_embedder()
    model.embed_sync(["load the model once"])
    return model


def cosine(a: list[float], b: list[float]) -> float:
    return sum(x * y for x, y in zip(a, b, strict=True))


def test_local_model_embeds_meaning_deterministically(embedder: LocalEmbedder) -> None:
    cat, kitten, revenue = embedder.embed_sync(
        ["The cat sat on the mat.", "A kitten rests on a rug.", "Quarterly revenue grew 4%."]
    )
    assert len(cat) == LOCAL_DIM
    assert cosine(cat, kitten) > cosine(cat, revenue) + 0.2
    alone = embedder.embed_sync(["The cat sat on the mat."])[0]
    assert embedder.embed_sync(["The cat sat on the mat."])[0] == alone
    # Batched with other texts the same text embeds a few ulps differently: one
    # reason passages carry their vector in the event instead of being
    # re-embedded on replay.
    assert alone == pytest.approx(cat, abs=1e-5)


async def store(
    pool: asyncpg.Pool,
    eventlog: EventLog,
    embedder: LocalEmbedder,
    agent_id: str,
    items: list[tuple[str, list[str], datetime]],
) -> dict[str, str]:
    projector = Projector(archival_projection, pool, eventlog)
    vectors = embedder.embed_sync([text for text, _, _ in items])
    ids = {}
    for seq, ((text, tags, at), vector) in enumerate(zip(items, vectors, strict=True), 1):
        pid = new_id("passage")
        ids[text] = pid
        event = PassageInserted(
            agent_id=agent_id,
            passage=ArchivalPassage(
                passage_id=pid,
                text=text,
                tags=tags,
                created_at=at,
                importance=5,
                embedding_model=LOCAL_MODEL,
                embedding=pack_vector(vector),
            ),
        )
        envelope = Envelope.wrap(event, aggregate_id=agent_id, producer="test")
        await projector.apply(seq, f"o.evt.archival.{agent_id}", envelope.encode())
    return ids


async def find(
    pool: asyncpg.Pool, embedder: LocalEmbedder, agent_id: str, query: str, **filters: object
) -> list[str]:
    hits = await archival.search(
        pool,
        agent_id,
        query=query,
        model=LOCAL_MODEL,
        vector=embedder.embed_sync([query])[0],
        filters=archival.SearchFilter(**filters),  # type: ignore[arg-type]
        settings=StreamSettings(),
        top_k=3,
        now=NOW,
    )
    return [h.row["text"] for h in hits]


async def test_hybrid_search_finds_meaning_and_exact_codes(
    pool: asyncpg.Pool, eventlog: EventLog, embedder: LocalEmbedder
) -> None:
    agent = f"agent-{uuid.uuid4()}"
    week_ago = NOW - timedelta(days=7)
    await store(
        pool,
        eventlog,
        embedder,
        agent,
        [
            ("Sam's home is in Lisbon, near the river.", ["sam"], week_ago),
            ("The quarterly budget review is on Friday.", ["work"], NOW),
            ("Build artefact QX-7731 failed its signature check.", ["work", "ci"], NOW),
            ("Sam adopted a grey cat called Miso.", ["sam", "pets"], week_ago),
        ],
    )
    # No word in common with the answer: found by the embedding.
    assert (await find(pool, embedder, agent, "Where does Sam live?"))[0].startswith(
        "Sam's home is in Lisbon"
    )
    # A code the embedding does not capture: found by full-text search.
    assert (await find(pool, embedder, agent, "QX-7731"))[0].startswith("Build artefact QX-7731")
    tagged = await find(pool, embedder, agent, "Sam", tags=["pets", "ci"], tag_match_mode="any")
    assert set(tagged) == {
        "Build artefact QX-7731 failed its signature check.",
        "Sam adopted a grey cat called Miso.",
    }
    both = await find(pool, embedder, agent, "Sam", tags=["sam", "pets"], tag_match_mode="all")
    assert both == ["Sam adopted a grey cat called Miso."]
    recent = await find(pool, embedder, agent, "Sam", start=NOW - timedelta(days=1))
    assert set(recent) == {
        "The quarterly budget review is on Friday.",
        "Build artefact QX-7731 failed its signature check.",
    }
    # Another agent's archive is never searched.
    assert await find(pool, embedder, f"agent-{uuid.uuid4()}", "Where does Sam live?") == []


async def test_a_scope_read_or_searched_through_the_index_finds_the_same_nearest(
    pool: asyncpg.Pool, eventlog: EventLog, embedder: LocalEmbedder
) -> None:
    """archival.EXACT_UP_TO: a small scope's passages are read rather than found through
    the HNSW index; both give the same nearest passages, with the same distances."""
    agent = f"agent-{uuid.uuid4()}"
    texts = [
        "Sam's home is in Lisbon, near the river.",
        "The quarterly budget review is on Friday.",
        "Sam adopted a grey cat called Miso.",
        "Deploys happen on Tuesdays.",
    ]
    await store(pool, eventlog, embedder, agent, [(t, [], NOW) for t in texts])
    vector = embedder.embed_sync(["Where does Sam live?"])[0]
    found = []
    for exact in (False, True):
        sql = archival.candidates_sql(LOCAL_DIM, "", False, archival.OWN_SCOPE, exact)
        rows = await pool.fetch(sql, agent, LOCAL_MODEL, vector, None)
        found.append(sorted((round(float(r["cosine"]), 5), r["text"]) for r in rows))
    assert found[0] == found[1]
    assert max(found[1])[1] == "Sam's home is in Lisbon, near the river."
    assert len(found[1]) == 4
