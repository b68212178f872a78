"""How long a run's steps take (o.agent.step.duration): the model's answer and the tool
calls it asked for, measured only for steps that asked the model (a step answered from
the log after a crash costs nothing worth measuring)."""

from __future__ import annotations

import time

from o_executor.providers import Handle
from o_runtime.instruments import measured


class StepClock:
    """`next()` as each step begins, `asked(handle)` once it asks the model, `stop()` when
    the run's steps end: each step that asked is measured from its start to the next's."""

    def __init__(self) -> None:
        self._start = 0.0
        self._attributes: dict[str, str] | None = None

    def next(self) -> None:
        self.stop()
        self._start = time.perf_counter()

    def asked(self, handle: Handle) -> None:
        self._attributes = {
            "gen_ai.provider.name": handle.provider,
            "gen_ai.request.model": handle.model,
        }

    def stop(self) -> None:
        if self._attributes is not None:
            measured.step_duration.record(time.perf_counter() - self._start, self._attributes)
            self._attributes = None
