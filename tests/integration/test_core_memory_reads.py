"""An agent's core memory as one jsonb value (o_memory/core_memory.py), read alone and with
the agent in one round trip (o_executor/agent_reads.py): blocks in attach order with their
fields as Python types, the archive's size and tags (its own and its archives'), its
folders, a conversation's own blocks in place of the agent's. Real Postgres."""

from __future__ import annotations

from datetime import UTC, datetime

import asyncpg

from o_contracts.ids import new_id
from o_executor.agent_reads import read_agent, read_agent_and_core
from o_memory.core_memory import BLOCK_FIELDS, read_core_memory

T0 = datetime(2026, 12, 1, tzinfo=UTC)


async def an_agent(pool: asyncpg.Pool) -> str:
    agent_id = new_id("agent")
    await pool.execute(
        "INSERT INTO agents (id, name, system, agent_type, llm_config, created_at, updated_at,"
        " last_seq) VALUES ($1, 'reader', 'You are terse.', 'letta_v1_agent', $2, $3, $3, 1)",
        agent_id,
        {"model": "gpt-4o-mini", "model_endpoint_type": "openai", "context_window": 8000},
        T0,
    )
    return agent_id


async def a_block(
    pool: asyncpg.Pool, label: str, value: str, *, agent_id: str | None, position: int = 0
) -> str:
    block_id = new_id("block")
    await pool.execute(
        'INSERT INTO blocks (id, label, value, "limit", description, read_only, metadata,'
        " tags, version, created_at, updated_at, last_seq)"
        " VALUES ($1, $2, $3, 5000, $4, $5, $6, $7, 3, $8, $8, 42)",
        block_id,
        label,
        value,
        f"the {label}",
        label == "persona",
        {"source": "test", "nested": {"b": 1, "a": [1, 2]}},
        ["core", label],
        T0,
    )
    if agent_id is not None:
        await pool.execute(
            "INSERT INTO agent_blocks (agent_id, block_id, position) VALUES ($1, $2, $3)",
            agent_id,
            block_id,
            position,
        )
    return block_id


async def an_agent_with_two_blocks(pool: asyncpg.Pool) -> str:
    """An agent with a persona, then a human block: its id."""
    agent_id = await an_agent(pool)
    await a_block(pool, "persona", "I help.", agent_id=agent_id, position=1)
    await a_block(pool, "human", "Name: Ada", agent_id=agent_id, position=2)
    return agent_id


async def test_core_memory_reads_blocks_in_order_with_their_fields_and_the_archives_summary(
    pool: asyncpg.Pool,
) -> None:
    agent_id = await an_agent(pool)
    human = await a_block(pool, "human", "Name: Ada", agent_id=agent_id, position=2)
    persona = await a_block(pool, "persona", "I help.", agent_id=agent_id, position=1)
    archive_id = new_id("archive")
    await pool.execute(
        "INSERT INTO archive_agents (archive_id, agent_id, attached_seq) VALUES ($1, $2, 1)",
        archive_id,
        agent_id,
    )
    await pool.executemany(
        "INSERT INTO archival_counts (agent_id, passages) VALUES ($1, $2)",
        [(agent_id, 3), (archive_id, 4)],
    )
    await pool.executemany(
        "INSERT INTO archival_tag_counts (agent_id, tag, passages) VALUES ($1, $2, 1)",
        [(agent_id, "work"), (archive_id, "home"), (archive_id, "work")],
    )

    core = await read_core_memory(pool, agent_id)

    assert [b["id"] for b in core["blocks"]] == [persona, human]
    assert core["blocks"][1] == {
        "id": human,
        "label": "human",
        "value": "Name: Ada",
        "limit": 5000,
        "description": "the human",
        "read_only": False,
        "metadata": {"source": "test", "nested": {"b": 1, "a": [1, 2]}},
        "tags": ["core", "human"],
        "version": 3,
        "last_seq": 42,
    }
    assert core["blocks"][0]["read_only"] is True
    # (The fields in the order prompts and the core-memory RPC have always had them.)
    assert tuple(core["blocks"][0]) == BLOCK_FIELDS
    assert core["archival_count"] == 7
    assert core["archival_tags"] == ["home", "work"]
    assert core["directories"] == []


async def test_an_agent_read_with_its_core_memory_has_what_each_read_alone_has(
    pool: asyncpg.Pool,
) -> None:
    agent_id = await an_agent_with_two_blocks(pool)
    await pool.execute("INSERT INTO archival_counts (agent_id, passages) VALUES ($1, 2)", agent_id)
    folder_id = new_id("source")
    await pool.execute(
        "INSERT INTO folders (id, name, description, instructions, embedding_config,"
        " created_at, updated_at, last_seq) VALUES ($1, 'notes', 'my notes', 'read them',"
        " '{}', $2, $2, 1)",
        folder_id,
        T0,
    )
    await pool.execute(
        "INSERT INTO folder_files (id, folder_id, file_name, original_file_name, file_type,"
        " file_size, sha256, status, created_at, updated_at)"
        " VALUES ($1, $2, 'a.txt', 'a.txt', 'text/plain', 3, 'x', 'completed', $3, $3)",
        new_id("file"),
        folder_id,
        T0,
    )
    await pool.execute(
        "INSERT INTO agent_folders (agent_id, folder_id, attached_at, attached_seq)"
        " VALUES ($1, $2, $3, 1)",
        agent_id,
        folder_id,
        T0,
    )

    agent, core = await read_agent_and_core(pool, agent_id)

    assert agent == await read_agent(pool, agent_id)
    assert agent is not None and agent.system == "You are terse."
    assert core == await read_core_memory(pool, agent_id)
    assert core is not None and [b["label"] for b in core["blocks"]] == ["persona", "human"]
    assert core["archival_count"] == 2
    assert core["directories"] == [
        {
            "name": "notes",
            "description": "my notes",
            "instructions": "read them",
            "files": [{"name": "a.txt", "open": False, "visible": None}],
        }
    ]


async def test_a_conversations_own_blocks_take_the_place_of_the_agents_with_their_labels(
    pool: asyncpg.Pool,
) -> None:
    agent_id = await an_agent_with_two_blocks(pool)
    own_human = await a_block(pool, "human", "Name: Grace", agent_id=None)

    core = await read_core_memory(pool, agent_id, [own_human])

    assert [(b["label"], b["value"]) for b in core["blocks"]] == [
        ("persona", "I help."),
        ("human", "Name: Grace"),
    ]


async def test_an_agent_without_blocks_or_passages_has_an_empty_core_memory_and_none_is_none(
    pool: asyncpg.Pool,
) -> None:
    agent_id = await an_agent(pool)

    agent, core = await read_agent_and_core(pool, agent_id)

    assert agent is not None
    assert core == {"blocks": [], "archival_count": 0, "archival_tags": [], "directories": []}
    assert await read_agent_and_core(pool, new_id("agent")) == (None, None)
