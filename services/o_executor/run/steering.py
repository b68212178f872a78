"""Steering: messages sent to a run in flight join its context before its next model call.

The gateway records a request to steer the run (RunSteerRequested); the run
learns of it as the executor does of a cancellation (heard live, or read from
the log when an append of its conflicts). Before asking the model at a step,
the run takes every request it knows of and has not taken, and records that
(RunSteered) before the model is asked: a resumed run adds the same messages
at the same step, and never takes one twice. A request the run never took
(it ended first) is run by the request's own run (StartRun.steer).
"""

from __future__ import annotations

from o_contracts.events import RunSteered
from o_contracts.models import ChatMessage
from o_executor.run.context import Run


async def before_model_call(
    run: Run, step: int, messages: list[ChatMessage], *, asking: bool
) -> None:
    """Add to `messages` what the run takes before its model call at `step`.

    `asking`: the model is to be asked now (not a step answered before a
    crash, whose recorded answer saw only what was recorded before it).
    """
    taken = run.inputs.recorded.steered.get(step)
    if taken is None and asking:
        pending = [
            request
            for request in await run.deps.steering()
            if request.steer_run_id not in run.state.steered
        ]
        if pending:
            taken = RunSteered(
                run_id=run.run_id,
                agent_id=run.agent_id,
                step_number=step,
                steer_run_ids=[r.steer_run_id for r in pending],
                messages=[m for r in pending for m in r.messages],
            )
            await run.record(taken, f"steered-{step}")
    if taken is not None:
        run.state.steered.update(taken.steer_run_ids)
        messages += taken.messages
