"""The roll call's answer on the wire, when the asker stops waiting, and who may take part."""

from __future__ import annotations

from datetime import UTC, datetime

import msgpack

from o_contracts import subjects
from o_contracts.roll_call import Present
from o_runtime.roll_call import quiet_enough, settled
from o_setup import roles


def test_an_answer_reads_back_and_ignores_fields_a_newer_replica_adds() -> None:
    answer = Present(
        service="memory",
        instance="pod-1:7",
        version="0.1.0",
        started_at=datetime(2026, 11, 24, tzinfo=UTC),
        ready=False,
        checks={"embedder": "not loaded yet"},
    )
    assert Present.decode(answer.encode()) == answer
    newer = msgpack.packb(answer.model_dump(mode="json") | {"zone": "eu-1"})
    assert Present.decode(newer) == answer


def test_the_asker_settles_once_every_expected_service_has_answered() -> None:
    assert not settled(["gateway", "executor"], ["gateway"])
    assert settled(["gateway", "executor"], ["executor", "gateway", "memory"])
    assert settled([], [])


def test_the_quiet_that_ends_the_wait_is_as_long_as_the_answers_took() -> None:
    # Answers in a few milliseconds: the settle. Answers a loaded machine took 0.6 s to give:
    # another replica may come as late again.
    assert quiet_enough(0.25, 0.004) == 0.25
    assert quiet_enough(0.25, 0.6) == 0.6


def test_every_service_answers_the_roll_call_and_only_the_gateway_asks_it() -> None:
    for role in roles.SERVICES:
        assert subjects.ROLL_CALL in role.grant.subscribe, role.name
        assert role.grant.responds, role.name
    askers = {r.name for r in roles.ROLES.values() if subjects.ROLL_CALL in r.grant.publish}
    assert askers == {"gateway"}
