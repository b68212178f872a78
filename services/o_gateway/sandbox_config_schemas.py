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

from pydantic import BaseModel, ConfigDict, Field, model_validator

from o_contracts.events.sandbox_configs import SandboxType
from o_contracts.limits import MAX_LIST_ITEMS
from o_contracts.pip_requirements import MAX_REQUIREMENTS, PipRequirement
from o_gateway.schemas import Body, Description, SecretName

# Letta's default folder for local tool runs (O runs each call in a scratch folder of its own:
# the setting is kept for clients that show it).
DEFAULT_SANDBOX_DIR = os.path.expanduser("~/.letta/tool_execution_dir")
Text = Annotated[str, Field(max_length=4096)]
Strings = Annotated[list[Text], Field(max_length=MAX_LIST_ITEMS)]


class LocalSandboxConfig(BaseModel):
    model_config = ConfigDict(extra="ignore")

    sandbox_dir: Text | None = None
    use_venv: bool = False
    venv_name: Text = "venv"
    pip_requirements: list[PipRequirement] = Field(
        default_factory=list, max_length=MAX_REQUIREMENTS
    )

    @model_validator(mode="before")
    @classmethod
    def _dir(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("sandbox_dir") is None:
            data = {**data, "sandbox_dir": DEFAULT_SANDBOX_DIR}
        return data


class E2BSandboxConfig(BaseModel):
    model_config = ConfigDict(extra="ignore")

    timeout: int = Field(default=300, ge=1, le=86_400)
    template: Text | None = None
    pip_requirements: Strings | None = None

    @model_validator(mode="before")
    @classmethod
    def _template(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("template") is None:
            data = {**data, "template": os.environ.get("E2B_SANDBOX_TEMPLATE_ID")}
        return data


class ModalSandboxConfig(BaseModel):
    model_config = ConfigDict(extra="ignore")

    timeout: int = Field(default=60, ge=1, le=86_400)
    pip_requirements: Strings | None = None
    npm_requirements: Strings | None = None
    language: Literal["python", "typescript"] = "python"


AnyConfig = LocalSandboxConfig | E2BSandboxConfig | ModalSandboxConfig
SHAPES: dict[SandboxType, type[AnyConfig]] = {
    "local": LocalSandboxConfig,
    "e2b": E2BSandboxConfig,
    "modal": ModalSandboxConfig,
}


def type_of(config: AnyConfig) -> SandboxType:
    return next(t for t, shape in SHAPES.items() if isinstance(config, shape))


def stored(config: AnyConfig) -> dict[str, Any]:
    """What is kept and shown: every field but those without a value."""
    return config.model_dump(exclude_none=True)


class SandboxConfigBody(Body):
    config: AnyConfig


class EnvVarBody(Body):
    key: SecretName
    value: Annotated[str, Field(max_length=65536)]
    description: Description | None = None


class EnvVarUpdateBody(Body):
    key: SecretName | None = None
    value: Annotated[str, Field(max_length=65536)] | None = None
    description: Description | None = None
