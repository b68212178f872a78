"""The operator's settings for completion callbacks, read once at the gateway's start."""

from __future__ import annotations

from dataclasses import dataclass, field

from o_runtime.egress_policy import TargetPolicy
from o_runtime.env import BadSetting, Env

SECRET_ENV = "O_CALLBACK_SECRET"
# A shorter secret is guessable offline from one signed body.
MIN_SECRET_CHARS = 16
# Deferred deliveries wait in the commands stream, which keeps a command 7 days.
MAX_RETRY_FOR = 6 * 24 * 3600.0


@dataclass(frozen=True)
class CallbackSettings:
    # Every delivery is signed with it (HMAC-SHA256); without one, a callback_url is
    # refused (400) and a run that names one over NATS has its delivery abandoned.
    secret: str | None = None
    # O_CALLBACK_ALLOWED_TARGETS: networks (CIDR) and host names a callback may reach
    # although they are loopback, private, link-local or otherwise not public.
    targets: TargetPolicy = field(default_factory=TargetPolicy)
    # One attempt, from resolving the host to the end of the answer (Letta waits 5 s).
    timeout: float = 10.0
    # What is read of a receiver's answer at most (its status is all that matters).
    max_response_bytes: int = 64 * 1024
    # Attempts after a failure wait this long, doubling up to retry_max_delay, for at
    # most retry_for seconds after the run ended.
    retry_initial: float = 1.0
    retry_max_delay: float = 600.0
    retry_for: float = 24 * 3600.0
    # A delivery held by a gateway that died is taken over after this long.
    ack_wait: float = 30.0
    # Attempts in flight at once per gateway replica.
    concurrency: int = 32

    @classmethod
    def from_env(cls, env: Env) -> CallbackSettings:
        secret = env.optional(SECRET_ENV)
        if secret is not None and len(secret) < MIN_SECRET_CHARS:
            raise BadSetting(f"{SECRET_ENV} must be at least {MIN_SECRET_CHARS} characters")
        try:
            targets = TargetPolicy.parse(env.text("O_CALLBACK_ALLOWED_TARGETS", ""))
        except ValueError as exc:
            raise BadSetting(f"O_CALLBACK_ALLOWED_TARGETS: {exc}") from None
        retry_for = env.number("O_CALLBACK_RETRY_FOR", 24 * 3600.0, minimum=0.0)
        if retry_for > MAX_RETRY_FOR:
            raise BadSetting(f"O_CALLBACK_RETRY_FOR must be at most {MAX_RETRY_FOR:g} seconds")
        return cls(
            secret=secret,
            targets=targets,
            timeout=env.number("O_CALLBACK_TIMEOUT", 10.0, minimum=0.1),
            max_response_bytes=env.integer("O_CALLBACK_MAX_RESPONSE_BYTES", 64 * 1024, minimum=0),
            retry_initial=env.number("O_CALLBACK_RETRY_INITIAL", 1.0, minimum=0.01),
            retry_max_delay=env.number("O_CALLBACK_RETRY_MAX_DELAY", 600.0, minimum=0.01),
            retry_for=retry_for,
            ack_wait=env.number("O_CALLBACK_ACK_WAIT", 30.0, minimum=1.0),
            concurrency=env.integer("O_CALLBACK_CONCURRENCY", 32, minimum=1),
        )
