"""The evolution service's settings, read once at start (o_runtime/env.py validates them)."""

from __future__ import annotations

from dataclasses import dataclass, field

from o_evolution.live_first import YieldPolicy
from o_executor.llm import Retries
from o_runtime.env import Env

# Commands in the consumer's hands at once across replicas, most of them evaluations waiting
# for the shadow's turn (evaluation.py defers them: JetStream counts a command nacked with a
# delay as pending, so a bound of the handlers' concurrency would let four waiting
# evaluations stop every other evolution command).
MAX_PENDING_COMMANDS = 1_000


@dataclass(frozen=True)
class SleeptimeBudget:
    """What one agent's sleep-time companions may spend; past it, turns are skipped
    (and the skip recorded). User runs never count against it."""

    runs_per_hour: int = 60
    tokens_per_day: int = 2_000_000


@dataclass(frozen=True)
class EvolutionSettings:
    budget: SleeptimeBudget = SleeptimeBudget()
    # Server-wide switch: off, no agent evolves whatever its own configuration says.
    enabled: bool = True
    # The judge is the operator's choice, never an agent's: a candidate cannot reach it.
    judge_model: str = "openai/gpt-4o-mini"
    retries: Retries = field(default_factory=Retries)
    # Shadow work never slows users: at most this many evaluations run at once in a
    # replica, and a case waits for the executor to be idle a moment (live_first.py).
    shadow_concurrency: int = 1
    shadow_yield: YieldPolicy = field(default_factory=YieldPolicy)
    # The shadow worker's memory (this process's resident set, MB): a case that would
    # start above it is not run, and is inconclusive. 0: no limit.
    shadow_max_rss_mb: int = 0
    # The share of the machine an evaluation may use: after a case that took t seconds of
    # CPU it rests t * (1 - duty) / duty, leaving the cores to users' runs.
    shadow_duty: float = 0.5
    # The process's CPU niceness (0-19; higher yields more): shadow work is background.
    nice: int = 10

    @classmethod
    def from_env(cls, env: Env) -> EvolutionSettings:
        return cls(
            budget=SleeptimeBudget(
                runs_per_hour=env.integer("O_SLEEPTIME_RUNS_PER_HOUR", 60, minimum=0),
                tokens_per_day=env.integer("O_SLEEPTIME_TOKENS_PER_DAY", 2_000_000, minimum=0),
            ),
            enabled=env.integer("O_EVOLUTION_ENABLED", 1, minimum=0) > 0,
            judge_model=env.text("O_EVOLUTION_JUDGE_MODEL", "openai/gpt-4o-mini"),
            shadow_concurrency=env.integer("O_SHADOW_CONCURRENCY", 1, minimum=1),
            shadow_yield=YieldPolicy(
                quiet=env.number("O_SHADOW_QUIET", 0.05, minimum=0.001),
                max_yield=env.number("O_SHADOW_MAX_YIELD", 2.0, minimum=0.0),
                pause_pending=env.integer("O_SHADOW_PAUSE_PENDING", 20, minimum=0),
            ),
            shadow_max_rss_mb=env.integer("O_SHADOW_MAX_RSS_MB", 0, minimum=0),
            nice=env.integer("O_EVOLUTION_NICE", 10, minimum=0),
            shadow_duty=min(env.number("O_SHADOW_DUTY", 0.5, minimum=0.01), 1.0),
        )
