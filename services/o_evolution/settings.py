"""The evolution service's settings, read once at start (o_runtime/env.py validates them)."""

from __future__ import annotations

from dataclasses import dataclass

from o_runtime.env import Env


@dataclass(frozen=True)
class SleeptimeBudget:
    """What one agent's sleep-time companions may spend; past it, turns are skipped
    (and the skip recorded). User runs never count against it."""

    runs_per_hour: int = 60
    tokens_per_day: int = 2_000_000


@dataclass(frozen=True)
class EvolutionSettings:
    budget: SleeptimeBudget = SleeptimeBudget()

    @classmethod
    def from_env(cls, env: Env) -> EvolutionSettings:
        return cls(
            budget=SleeptimeBudget(
                runs_per_hour=env.integer("O_SLEEPTIME_RUNS_PER_HOUR", 60, minimum=0),
                tokens_per_day=env.integer("O_SLEEPTIME_TOKENS_PER_DAY", 2_000_000, minimum=0),
            )
        )
