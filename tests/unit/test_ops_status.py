"""What `o_ops status` and the status route judge and print, from facts given (no servers)."""

from __future__ import annotations

from datetime import UTC, datetime

from o_contracts.roll_call import Present
from o_ops.status import render
from o_ops.system_status import (
    SERVICES,
    ConsumerState,
    ProjectionLag,
    SystemStatus,
    expected_services,
    max_lag,
    notes,
    owner_of,
    problems,
)

AT = datetime(2026, 11, 24, 12, 0, tzinfo=UTC)


def present(service: str, instance: str = "h:1", **checks: str) -> Present:
    return Present(
        service=service,
        instance=instance,
        version="0.1.0",
        started_at=AT,
        ready=all(v == "ok" for v in checks.values()),
        checks={"nats": "ok", **checks},
    )


def status(**changes: object) -> SystemStatus:
    base = SystemStatus(
        at=AT,
        log_last_seq=120,
        expected=list(SERVICES),
        services=[present(s) for s in SERVICES],
        consumers=[ConsumerState(stream="O_COMMANDS", name="executor", service="executor")],
        projections=[ProjectionLag(name="runs", service="executor", position=118, lag_seconds=0)],
    )
    return base.model_copy(update=changes)


def test_a_system_whose_every_service_answers_ready_has_no_problem() -> None:
    assert problems(status()) == []
    assert notes(status()) == []


def test_a_service_nobody_answers_for_and_an_unready_replica_are_problems() -> None:
    services = [present(s) for s in SERVICES if s != "evolution"]
    services.append(present("executor", "h:2", **{"projection runs": "45.0s behind the log"}))
    found = problems(status(services=services))
    assert found == [
        "evolution: no process answered the roll call",
        "executor (h:2) is not ready: projection runs: 45.0s behind the log",
    ]


def test_a_missing_durable_and_lags_over_the_limit_are_problems() -> None:
    consumers = [
        ConsumerState(stream="O_COMMANDS", name="memory", service="memory", present=False),
        ConsumerState(
            stream="O_COMMANDS", name="executor", service="executor", pending=4, lag_seconds=31.2
        ),
        ConsumerState(
            stream="O_EVENTS", name="evolution-turns", service="evolution", lag_seconds=29.0
        ),
    ]
    projections = [ProjectionLag(name="agents", service="gateway", position=3, lag_seconds=40)]
    found = problems(status(consumers=consumers, projections=projections), max_lag=30)
    assert found == [
        "durable consumer memory on O_COMMANDS is missing (python -m o_setup apply)",
        "consumer executor on O_COMMANDS: the oldest of 4 waiting has waited 31s",
        "projection agents is 40s behind the log",
    ]


def test_dead_letters_and_redeliveries_are_noted_not_problems() -> None:
    consumers = [ConsumerState(stream="O_COMMANDS", name="memory", service="memory", redelivered=2)]
    s = status(dead_letters={"memory": 1, "projection-runs": 2}, consumers=consumers)
    assert problems(s) == []
    assert notes(s) == [
        "3 dead letter(s) kept (1 memory, 2 projection-runs): python -m o_ops dead-letters list",
        "consumer memory on O_COMMANDS: 2 message(s) redelivered",
    ]


def test_the_expected_services_are_those_named_else_o_services_else_all_five() -> None:
    assert expected_services("gateway, o_memory", {"O_SERVICES": "executor"}) == [
        "gateway",
        "memory",
    ]
    assert expected_services(None, {"O_SERVICES": "gateway,executor"}) == ["gateway", "executor"]
    assert expected_services(None, {}) == list(SERVICES)


def test_the_lag_limit_is_readinesss_setting() -> None:
    assert max_lag({}) == 30.0
    assert max_lag({"O_READY_MAX_PROJECTION_LAG": "5"}) == 5.0


def test_a_projection_belongs_to_the_service_of_its_module() -> None:
    assert owner_of("o_executor.projections:runs") == "executor"
    assert owner_of("o_memory.files.projection:folders") == "memory"
    assert owner_of("o_schedules.projection:schedules") == "evolution"


def test_the_table_shows_each_replica_a_missing_service_and_the_verdict() -> None:
    services = [present(s) for s in SERVICES if s != "evolution"]
    text = render(status(services=services, dead_letters={"memory": 2}, problems=["x broke"]))
    lines = text.splitlines()
    assert lines[0] == "O at 2026-11-24 12:00:00Z: the log is at sequence 120"
    assert any(line.split()[:3] == ["evolution", "-", "NO"] for line in lines)
    assert any(line.split()[:3] == ["gateway", "h:1", "yes"] for line in lines)
    assert "total     2" in lines
    assert lines[-1] == "PROBLEM: x broke"
