"""The order streams are copied in, the manifest, and when a restore may go ahead."""

from __future__ import annotations

import pytest

from o_ops.backup_plan import (
    CannotRestore,
    Manifest,
    StreamCopy,
    backup_order,
    restore_plan,
)


def copy(name: str) -> StreamCopy:
    return StreamCopy(name, f"{name}.tar.s2", 10, "ab" * 32, 3, 1, 3, {"config": {"name": name}})


def test_commands_then_the_run_queue_then_the_log_then_the_objects() -> None:
    streams = ["OBJ_O_IMAGES", "O_EVENTS", "KV_o_executor_runs", "O_DEAD_LETTERS", "O_COMMANDS",
               "OBJ_O_FILES", "OTHER"]  # fmt: skip
    assert backup_order(streams) == [
        "O_COMMANDS",
        "O_DEAD_LETTERS",
        "KV_o_executor_runs",
        "OTHER",
        "O_EVENTS",
        "OBJ_O_FILES",
        "OBJ_O_IMAGES",
    ]


def test_the_manifest_reads_back_as_written_and_refuses_other_files() -> None:
    manifest = Manifest(made_at="2026-11-24T12:00:00+00:00", o_version="0.1.0",
                        streams=[copy("O_EVENTS")])  # fmt: skip
    assert Manifest.loads(manifest.dumps()) == manifest
    with pytest.raises(CannotRestore):
        Manifest.loads('{"format": "something else"}')


def test_empty_streams_the_setup_role_made_are_replaced_and_missing_ones_made() -> None:
    manifest = Manifest("t", "v", [copy("O_COMMANDS"), copy("O_EVENTS")])
    assert restore_plan(manifest, {"O_EVENTS": 0, "O_DEAD_LETTERS": 0}) == [
        ("O_COMMANDS", False),
        ("O_EVENTS", True),
    ]


def test_a_server_holding_messages_in_any_backed_up_stream_is_not_touched() -> None:
    manifest = Manifest("t", "v", [copy("O_COMMANDS"), copy("O_EVENTS")])
    with pytest.raises(CannotRestore) as refused:
        restore_plan(manifest, {"O_COMMANDS": 0, "O_EVENTS": 12})
    assert "O_EVENTS" in str(refused.value)
