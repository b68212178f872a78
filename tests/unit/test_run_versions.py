"""Which version a run serves in a canary (o_executor/run/versions.py)."""

from __future__ import annotations

import dataclasses

from o_contracts.evolution import Patch, ServedVersion, VersionSpec
from o_contracts.text_edits import block_edits
from o_evolution.canary import arm
from o_executor.run.agent import AgentConfig, Rollout
from o_executor.run.model_call import blocks_shown
from o_executor.run.versions import served

SPEC = VersionSpec(system="Be brief.", blocks={"persona": "Terse."}, tools=["send_message"])


def agent(weight: float) -> AgentConfig:
    return AgentConfig(
        id="agent-1",
        name="a",
        system="Be kind.",
        agent_type="memgpt_v2_agent",
        llm_config={"handle": "openai/gpt-4o-mini", "temperature": 0.7},
        tools=("send_message", "archival_memory_search"),
        rollout=Rollout("rollout-1", weight, "version-new", "version-old", SPEC),
    )


def test_without_a_canary_the_agent_serves_as_configured() -> None:
    plain = AgentConfig(
        id="agent-1", name="a", system="x", agent_type="memgpt_v2_agent", llm_config={}
    )
    assert served(plain, "run-1", None, None) is plain


def test_at_full_weight_every_run_takes_the_candidates_configuration() -> None:
    chosen = served(agent(100), "run-1", "conv-1", None)
    assert chosen.system == "Be brief." and chosen.tools == ("send_message",)
    assert chosen.block_values == {"persona": "Terse."}
    assert chosen.llm_config == {"handle": "openai/gpt-4o-mini", "temperature": 0.7}
    assert chosen.served == ServedVersion(
        rollout_id="rollout-1", arm="candidate", version_id="version-new", weight=100
    )
    assert chosen.rollout is None


def test_a_conversation_takes_the_arm_its_hash_gives() -> None:
    for conversation in (f"conv-{i}" for i in range(20)):
        expected = arm("agent-1", conversation, "rollout-1", 50)
        chosen = served(agent(50), "run-x", conversation, None)
        assert chosen.served is not None and chosen.served.arm == expected
        assert (chosen.system == "Be brief.") == (expected == "candidate")


def test_a_resumed_run_keeps_the_arm_it_recorded() -> None:
    recorded = ServedVersion(
        rollout_id="rollout-1", arm="candidate", version_id="version-new", weight=5
    )
    chosen = served(agent(0.01), "run-1", "conv-1", recorded)
    assert chosen.system == "Be brief." and chosen.served == recorded


def test_a_run_resumed_after_its_canary_ended_serves_the_agent_as_it_is() -> None:
    recorded = ServedVersion(rollout_id="rollout-0", arm="candidate", version_id="v", weight=5)
    chosen = served(agent(100), "run-1", "conv-1", recorded)
    assert chosen.system == "Be kind."


def test_the_candidate_makes_its_edits_on_the_blocks_as_they_are_at_each_run() -> None:
    """A canary's candidate arm used to show its version's fixed persona: what a run's
    memory tools wrote there during the canary vanished from the candidate's prompts."""
    edits = block_edits(
        Patch.model_validate(
            {"ops": [{"op": "append_text", "target": "block:persona", "text": "Greet."}]}
        )
    )
    rollout = Rollout("rollout-1", 100, "version-new", "version-old", SPEC, edits)
    base = agent(100)
    chosen = served(dataclasses.replace(base, rollout=rollout), "run-1", "conv-1", None)
    assert chosen.block_edits == edits
    live = [
        {"label": "persona", "value": "Terse.\nLikes sailing."},
        {"label": "human", "value": "Sam"},
    ]
    assert blocks_shown(live, chosen) == [
        {"label": "persona", "value": "Terse.\nLikes sailing.\nGreet."},
        {"label": "human", "value": "Sam"},
    ]
