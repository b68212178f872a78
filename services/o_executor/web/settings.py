"""The web tools' settings, read once at start (o_runtime/env.py validates them)."""

from __future__ import annotations

from dataclasses import dataclass, field

from o_runtime.egress_policy import TargetPolicy
from o_runtime.env import BadSetting, Env

EXA_KEY_ENV = "EXA_API_KEY"  # Letta's name, on the server and in an agent's tool secrets
EXA_DEFAULT_URL = "https://api.exa.ai"


@dataclass(frozen=True)
class WebSettings:
    # The server's Exa key; an agent's own (its tool secret EXA_API_KEY) comes first.
    exa_api_key: str | None = None
    exa_base_url: str = EXA_DEFAULT_URL
    # Where fetch_webpage may connect: public addresses, and what the operator adds
    # (O_WEB_ALLOWED_TARGETS: networks, addresses, host names; egress_policy.py).
    targets: TargetPolicy = field(default_factory=TargetPolicy)
    # What is read of a page at most; a longer one is cut there.
    max_page_bytes: int = 5 * 1024 * 1024
    # What the model is given at most (Letta's return_char_limit for tools).
    max_answer_chars: int = 50_000
    max_redirects: int = 5

    @classmethod
    def from_env(cls, env: Env) -> WebSettings:
        try:
            targets = TargetPolicy.parse(env.text("O_WEB_ALLOWED_TARGETS", ""))
        except ValueError as exc:
            raise BadSetting(f"O_WEB_ALLOWED_TARGETS: {exc}") from None
        return cls(
            exa_api_key=env.optional(EXA_KEY_ENV),
            exa_base_url=env.text("O_EXA_BASE_URL", EXA_DEFAULT_URL).rstrip("/"),
            targets=targets,
            max_page_bytes=env.integer("O_WEB_MAX_PAGE_BYTES", 5 * 1024 * 1024, minimum=1024),
            max_answer_chars=env.integer("O_WEB_MAX_ANSWER_CHARS", 50_000, minimum=1000),
        )
