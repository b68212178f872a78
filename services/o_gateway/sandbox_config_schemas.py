"""Letta's sandbox configuration bodies (`/v1/sandbox-config/`), and how a configuration's
type follows from its fields.

Letta's body names no type: `config` is one of three shapes, and the one whose fields the
client set most wins (a tie goes to the shape that needed no conversion, then to local,
e2b, modal in that order). Pydantic's "smart" union decides exactly so, given that local
always counts `sandbox_dir` as set and e2b always counts `template` (both filled in before
validation, as Letta's are), so the same body means the same type here as there. Unknown
keys are ignored, as Letta ignores them.
"""

from __future__ import annotations

import os
from typing import Annotated, Any, Literal

from fastapi import HTTPException
from pydantic import BaseModel, ConfigDict, Field, model_validator

from o_contracts.events.sandbox_configs import SandboxType
from o_contracts.limits import MAX_LIST_ITEMS
from o_contracts.pip_requirements import MAX_REQUIREMENTS, PipRequirement
from o_gateway.schemas import Body, Description, SecretName

# Letta's default folder for local tool runs (O runs each call in a scratch folder of its own:
# the setting is kept for clients that show it).
DEFAULT_SANDBOX_DIR = os.path.expanduser("~/.letta/tool_execution_dir")
# Settings are not bounded in the shapes themselves: a bound a value breaks would make another
# shape win (a timeout of 0 would read as a local configuration and replace it). `checked`
# holds them to these once the type is decided.
MAX_TEXT = 4096
MAX_TIMEOUT = 86_400


class LocalSandboxConfig(BaseModel):
    model_config = ConfigDict(extra="ignore")

    sandbox_dir: str | None = None
    use_venv: bool = False
    venv_name: str = "venv"
    pip_requirements: list[PipRequirement] = Field(default_factory=list)

    @model_validator(mode="before")
    @classmethod
    def _dir(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("sandbox_dir") is None:
            data = {**data, "sandbox_dir": DEFAULT_SANDBOX_DIR}
        return data


class E2BSandboxConfig(BaseModel):
    model_config = ConfigDict(extra="ignore")

    timeout: int = 300
    template: str | None = None
    pip_requirements: list[str] | None = None

    @model_validator(mode="before")
    @classmethod
    def _template(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("template") is None:
            data = {**data, "template": os.environ.get("E2B_SANDBOX_TEMPLATE_ID")}
        return data


class ModalSandboxConfig(BaseModel):
    model_config = ConfigDict(extra="ignore")

    timeout: int = 60
    pip_requirements: list[str] | None = None
    npm_requirements: list[str] | None = None
    language: Literal["python", "typescript"] = "python"


AnyConfig = LocalSandboxConfig | E2BSandboxConfig | ModalSandboxConfig
SHAPES: dict[SandboxType, type[AnyConfig]] = {
    "local": LocalSandboxConfig,
    "e2b": E2BSandboxConfig,
    "modal": ModalSandboxConfig,
}


def type_of(config: AnyConfig) -> SandboxType:
    return next(t for t, shape in SHAPES.items() if isinstance(config, shape))


def checked(config: AnyConfig) -> AnyConfig:
    """The configuration, once its type is decided, held to O's limits (422 otherwise)."""
    problems = []
    for name, value in config:
        if isinstance(value, str) and len(value) > MAX_TEXT:
            problems.append(f"{name} is longer than {MAX_TEXT} characters")
        elif isinstance(value, list):
            most = MAX_REQUIREMENTS if name == "pip_requirements" else MAX_LIST_ITEMS
            if len(value) > most:
                problems.append(f"{name} has more than {most} items")
            if any(isinstance(v, str) and len(v) > MAX_TEXT for v in value):
                problems.append(f"an item of {name} is longer than {MAX_TEXT} characters")
        elif name == "timeout" and not 1 <= int(value) <= MAX_TIMEOUT:
            problems.append(f"timeout must be 1 to {MAX_TIMEOUT} seconds")
    if problems:
        raise HTTPException(422, f"{type_of(config)} sandbox configuration: " + "; ".join(problems))
    return config


def stored(config: AnyConfig) -> dict[str, Any]:
    """What is kept and shown: every field but those without a value."""
    return config.model_dump(exclude_none=True)


class StrictBody(Body):
    # Unknown keys are refused, as Letta's sandbox bodies refuse them: a body with a `type`
    # beside `config` must not quietly replace the local configuration.
    model_config = ConfigDict(extra="forbid")


class SandboxConfigBody(StrictBody):
    config: AnyConfig


class EnvVarBody(StrictBody):
    key: SecretName
    value: Annotated[str, Field(max_length=65536)]
    description: Description | None = None


class EnvVarUpdateBody(StrictBody):
    key: SecretName | None = None
    value: Annotated[str, Field(max_length=65536)] | None = None
    description: Description | None = None
