"""A sandbox configuration's type follows from its fields as Letta 0.16.8's does (each case
observed against a running Letta: the type it answered), and what the local configuration
adds to a tool run."""

from __future__ import annotations

import re
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest
from fastapi import HTTPException
from pydantic import ValidationError

from o_contracts.pip_requirements import PipRequirement
from o_gateway.routes.sandbox_configs import config_id_of
from o_gateway.sandbox_config_schemas import SandboxConfigBody, checked, stored, type_of
from o_runtime.sandbox_settings import LocalSandbox
from o_tool_sandbox.packages import Packages

OBSERVED = [
    ({}, "local"),
    ({"foo": 1}, "local"),
    ({"language": "typescript"}, "local"),
    ({"npm_requirements": ["x"]}, "local"),
    ({"template": "t"}, "local"),
    ({"pip_requirements": []}, "local"),
    ({"timeout": "abc"}, "local"),
    ({"use_venv": "yes"}, "local"),
    ({"timeout": 5}, "e2b"),
    ({"timeout": "5"}, "e2b"),
    ({"pip_requirements": ["numpy"]}, "e2b"),
    ({"sandbox_dir": "/x", "timeout": 5}, "e2b"),
    ({"npm_requirements": ["lodash"], "timeout": 30}, "e2b"),
    ({"timeout": 5, "language": "python"}, "e2b"),
    ({"npm_requirements": ["x"], "language": "python"}, "modal"),
    ({"timeout": 30, "language": "python", "npm_requirements": []}, "modal"),
    ({"language": "typescript", "npm_requirements": ["l"], "pip_requirements": ["x"]}, "modal"),
    ({"use_venv": True, "timeout": 5, "template": "x"}, "local"),
    ({"use_venv": "yes", "timeout": 5, "template": "x"}, "e2b"),
]


@pytest.mark.parametrize(("config", "expected"), OBSERVED)
def test_the_type_is_letta_s(config: dict[str, Any], expected: str) -> None:
    assert type_of(SandboxConfigBody.model_validate({"config": config}).config) == expected


def test_each_type_has_one_id_for_good_shaped_as_letta_s() -> None:
    letta = r"^sandbox-[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$"
    ids = {t: config_id_of(t) for t in ("local", "e2b", "modal")}
    assert len(set(ids.values())) == 3
    assert all(re.match(letta, i) for i in ids.values())
    assert ids == {t: config_id_of(t) for t in ("local", "e2b", "modal")}


@pytest.mark.parametrize("config", [{"timeout": 0}, {"timeout": 100_000}, {"timeout": -5}])
def test_a_bound_broken_is_refused_as_its_type_not_read_as_another(
    config: dict[str, Any],
) -> None:
    parsed = SandboxConfigBody.model_validate({"config": config}).config
    assert type_of(parsed) == "e2b"
    with pytest.raises(HTTPException) as refused:
        checked(parsed)
    assert refused.value.status_code == 422 and "timeout" in str(refused.value.detail)


def test_what_is_stored_is_every_field_with_a_value() -> None:
    local = SandboxConfigBody.model_validate(
        {"config": {"pip_requirements": [{"name": "six"}]}}
    ).config
    assert list(stored(local)) == ["sandbox_dir", "use_venv", "venv_name", "pip_requirements"]
    assert stored(local)["pip_requirements"] == [{"name": "six"}]
    e2b = SandboxConfigBody.model_validate({"config": {"timeout": 5}}).config
    assert stored(e2b) == {"timeout": 5}


def test_a_config_no_shape_takes_is_refused() -> None:
    with pytest.raises(ValidationError):
        SandboxConfigBody.model_validate({"config": {"pip_requirements": "numpy"}})


def test_the_agent_s_secrets_win_and_packages_are_each_once() -> None:
    six = PipRequirement(name="six", version="1.16.0")
    idna = PipRequirement(name="idna")
    local = LocalSandbox.of({"A": "config-a", "B": "config-b"}, [six.model_dump()])
    assert local.environment({"B": "agent-b"}) == {"A": "config-a", "B": "agent-b"}
    assert local.packages([idna, six]) == [idna, six]
    assert LocalSandbox.of(None, None).environment({"X": "x"}) == {"X": "x"}


def test_packages_are_refused_where_a_tool_could_change_another_s() -> None:
    # (Not under pytest's tmp_path, mode 0700: the tools' uids must be able to read it.)
    root = Path(tempfile.mkdtemp(prefix="o-test-sets-"))
    root.chmod(0o755)

    def offered(isolation: dict[str, object]) -> str:
        packages = Packages(root / "sets", sys.executable, True, 60)
        packages.refuse_unless_read_only(isolation)
        return packages.unavailable

    try:
        assert offered({"uid": 61001, "landlock": "failed (errno 1)"}) == ""
        assert offered({"uid": None, "landlock": "abi 7: filesystem, tcp, signals"}) == ""
        assert "could change the packages" in offered({"uid": None, "landlock": "unavailable"})
    finally:
        shutil.rmtree(root, ignore_errors=True)
