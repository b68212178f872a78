"""When a service calls itself ready: NATS connected, Postgres answering, its projections
within the lag allowed, and its own checks passing; every failing check says why."""

from __future__ import annotations

from o_runtime.readiness import decide
from o_runtime.sampling import ProjectionState

CAUGHT_UP = [ProjectionState("agents", 120, 0.0), ProjectionState("tools", 118, 0.4)]


def test_ready_when_everything_answers_and_projections_are_caught_up() -> None:
    readiness = decide(nats=True, postgres=True, projections=CAUGHT_UP, max_lag=30)
    assert readiness.ready
    assert readiness.checks == {
        "nats": "ok",
        "postgres": "ok",
        "projection agents": "ok",
        "projection tools": "ok",
    }
    assert readiness.body() == {"status": "ready", "checks": readiness.checks}


def test_not_ready_while_postgres_is_unreachable() -> None:
    readiness = decide(nats=True, postgres=False, projections=None, max_lag=30)
    assert not readiness.ready
    assert readiness.checks == {"nats": "ok", "postgres": "unreachable"}
    assert readiness.body()["status"] == "not ready"


def test_not_ready_while_nats_is_disconnected() -> None:
    readiness = decide(nats=False, postgres=None, projections=None, max_lag=30)
    assert (readiness.ready, readiness.checks) == (False, {"nats": "not connected"})


def test_a_projection_past_the_allowed_lag_is_named() -> None:
    behind = [ProjectionState("runs", 40, 31.25), ProjectionState("agents", 41, 30.0)]
    readiness = decide(nats=True, postgres=True, projections=behind, max_lag=30)
    assert not readiness.ready
    assert readiness.checks["projection runs"] == (
        "31.2s behind the log (O_READY_MAX_PROJECTION_LAG=30)"
    )
    # At the limit is still ready.
    assert readiness.checks["projection agents"] == "ok"


def test_a_service_without_a_database_is_judged_on_nats_and_its_own_checks() -> None:
    ready = decide(nats=True, postgres=None, projections=None, max_lag=30, others={"pool": None})
    assert (ready.ready, ready.checks) == (True, {"nats": "ok", "pool": "ok"})
    loading = decide(
        nats=True,
        postgres=True,
        projections=[],
        max_lag=30,
        others={"embedder": "the local embedding model is loading"},
    )
    assert not loading.ready
    assert loading.checks["embedder"] == "the local embedding model is loading"
