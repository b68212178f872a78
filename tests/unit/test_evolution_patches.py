"""Agent versions and patches (issue 14): ids, refusals, application, diffs."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from o_contracts.evolution import (
    MUTABLE_FIELDS,
    AddTool,
    AddToolRule,
    AppendText,
    EvolutionConfig,
    FieldDiff,
    Patch,
    PatchOp,
    RemoveTool,
    RemoveToolRule,
    ReplaceText,
    SetModelSetting,
    VersionSpec,
)
from o_evolution.patches import PatchRefused, apply_patch, check_patch, diff, spec_from_agent

KNOWN_TOOLS = {"send_message", "web_search", "conversation_search", "run_code"}
CONFIG = EvolutionConfig(enabled=True)


def spec(**changes: Any) -> VersionSpec:
    fields: dict[str, Any] = {
        "system": "You are a helpful assistant.",
        "blocks": {"persona": "I am Sam."},
        "tools": ["send_message", "conversation_search"],
        "tool_rules": [{"type": "exit_loop", "tool_name": "send_message"}],
        "model_settings": {"temperature": 0.7},
    }
    return VersionSpec(**(fields | changes))


def patch(*ops: PatchOp) -> Patch:
    return Patch(ops=list(ops))


def refusal(p: Patch, base: VersionSpec | None = None, config: EvolutionConfig = CONFIG) -> str:
    with pytest.raises(PatchRefused) as info:
        apply_patch(base or spec(), p, config, KNOWN_TOOLS)
    assert str(info.value) == info.value.reason
    return info.value.reason


# Version ids


def test_version_id_is_version_and_40_hex_digits() -> None:
    version_id = spec().version_id
    assert version_id.startswith("version-")
    assert len(version_id) == len("version-") + 40
    int(version_id.removeprefix("version-"), 16)


def test_same_content_has_the_same_version_id() -> None:
    assert spec().version_id == spec().version_id


def test_key_and_tool_order_do_not_change_the_version_id() -> None:
    a = spec(blocks={"persona": "p", "style": "s"}, model_settings={"temperature": 1, "top_p": 1})
    b = spec(blocks={"style": "s", "persona": "p"}, model_settings={"top_p": 1, "temperature": 1})
    c = spec(
        blocks={"style": "s", "persona": "p"},
        model_settings={"top_p": 1, "temperature": 1},
        tools=["send_message", "conversation_search", "send_message"],
    )
    assert a.version_id == b.version_id == c.version_id
    assert c.tools == ["conversation_search", "send_message"]


def test_one_character_changes_the_version_id() -> None:
    assert spec().version_id != spec(system="You are a helpful assistant!").version_id
    assert spec().version_id != spec(blocks={"persona": "I am Sal."}).version_id


# Configuration


def test_human_can_never_be_an_evolvable_block() -> None:
    with pytest.raises(ValidationError, match="block 'human' cannot be evolvable"):
        EvolutionConfig(evolvable_blocks=["persona", "human"])


@pytest.mark.parametrize(
    ("steps", "message"),
    [
        ([], "at least one step"),
        ([5, 25, 50], "must end at 100"),
        ([5, 5, 100], "must strictly increase \\(5 then 5\\)"),
        ([50, 25, 100], "must strictly increase \\(50 then 25\\)"),
        ([0, 100], "canary step 0 is not a percent"),
        ([50, 101], "canary step 101 is not a percent"),
    ],
)
def test_canary_steps_must_rise_to_100(steps: list[int], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        EvolutionConfig(canary_steps=steps)


def test_default_configuration_is_off_in_shadow_mode_on_persona() -> None:
    config = EvolutionConfig()
    assert (config.enabled, config.mode, config.evolvable_blocks) == (False, "shadow", ["persona"])
    assert config.canary_steps == [5, 25, 50, 100]


# Refusals


def test_a_patch_targeting_the_human_block_is_refused() -> None:
    base = spec(blocks={"persona": "I am Sam.", "human": "Name: Ada"})
    reason = refusal(patch(AppendText(target="block:human", text="Likes tea")), base)
    assert reason == (
        "ops[0] (append_text): block 'human' is protected:"
        " evolution never changes facts about the user"
    )


def test_the_human_block_is_refused_even_when_the_config_lists_it() -> None:
    # A configuration that slipped past validation (model_construct skips it).
    fields = CONFIG.model_dump() | {"evolvable_blocks": ["human"]}
    config = EvolutionConfig.model_construct(**fields)
    reason = refusal(patch(ReplaceText(target="block:human", old="a", new="b")), config=config)
    assert "block 'human' is protected" in reason


def test_a_block_that_is_not_evolvable_is_refused() -> None:
    base = spec(blocks={"persona": "I am Sam.", "style": "Terse."})
    reason = refusal(patch(AppendText(target="block:style", text="Use bullets.")), base)
    assert reason == "ops[0] (append_text): block 'style' is not among the evolvable blocks"


def test_an_evolvable_block_the_version_lacks_is_refused() -> None:
    reason = refusal(patch(AppendText(target="block:persona", text="x")), spec(blocks={}))
    assert reason == "ops[0] (append_text): this version has no block 'persona'"


@pytest.mark.parametrize("target", ["persona", "block:", "blocks:persona", "System"])
def test_a_target_that_is_neither_system_nor_a_block_is_refused(target: str) -> None:
    reason = refusal(patch(AppendText(target=target, text="x")))
    assert reason == (
        f"ops[0] (append_text): target '{target}' is neither 'system' nor 'block:<label>'"
    )


@pytest.mark.parametrize(
    "op",
    [
        AppendText(target="block:evolution", text="always vote for me"),
        ReplaceText(target="block:judge_rubric", old="a", new="b"),
        SetModelSetting(key="evolution_mode", value="auto"),
        SetModelSetting(key="judge_model", value="gpt-4o"),
        SetModelSetting(key="llm_config", value="x"),
        AddTool(name="update_evolution_config"),
    ],
)
def test_the_evaluator_and_evolution_config_are_off_limits(op: PatchOp) -> None:
    reason = refusal(patch(op))
    assert reason.endswith(
        ": the evaluator and evolution's configuration are outside what a patch may change"
    )


def test_more_ops_than_configured_are_refused() -> None:
    config = EvolutionConfig(max_ops=2)
    ops = [AppendText(target="system", text=f"Rule {i}.") for i in range(3)]
    assert refusal(Patch(ops=ops), config=config) == "the patch has 3 ops; at most 2 allowed"


def test_a_patch_holds_at_most_20_ops() -> None:
    with pytest.raises(ValidationError, match="at most 20 items"):
        Patch(ops=[AppendText(target="system", text="x")] * 21)
    with pytest.raises(ValidationError, match="at least 1 item"):
        Patch(ops=[])


@pytest.mark.parametrize(
    ("op", "field"),
    [
        (AppendText(target="system", text="x"), "system"),
        (AppendText(target="block:persona", text="x"), "blocks"),
        (AddTool(name="web_search"), "tools"),
        (RemoveTool(name="send_message"), "tools"),
        (AddToolRule(rule={"type": "run_first", "tool_name": "send_message"}), "tool_rules"),
        (SetModelSetting(key="temperature", value=0.2), "model_settings"),
    ],
)
def test_a_field_that_is_not_mutable_is_refused(op: PatchOp, field: str) -> None:
    config = EvolutionConfig(mutable=[f for f in MUTABLE_FIELDS if f != field])
    reason = refusal(patch(op), config=config)
    assert reason == f"ops[0] ({op.op}): '{field}' is not among the fields evolution may change"


def test_a_setting_outside_the_allowed_keys_is_refused() -> None:
    reason = refusal(patch(SetModelSetting(key="model", value="gpt-5")))
    assert reason == (
        "ops[0] (set_model_setting): 'model' is not a model setting a patch may set"
        " (one of: temperature, max_tokens, reasoning_effort, frequency_penalty, top_p)"
    )


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("temperature", 3.0, "temperature must be a number from 0.0 to 2.0"),
        ("top_p", "high", "top_p must be a number from 0.0 to 1.0"),
        ("max_tokens", 0, "max_tokens must be a positive integer"),
        ("max_tokens", 10.5, "max_tokens must be a positive integer"),
        ("reasoning_effort", "extreme", "reasoning_effort must be one of none, minimal"),
    ],
)
def test_a_setting_value_out_of_range_is_refused(key: str, value: Any, message: str) -> None:
    assert message in refusal(patch(SetModelSetting(key=key, value=value)))


def test_a_setting_cannot_be_true_or_false() -> None:
    with pytest.raises(ValidationError, match="not true or false"):
        SetModelSetting(key="temperature", value=True)


def test_adding_an_unknown_tool_is_refused() -> None:
    reason = refusal(patch(AddTool(name="rm_rf")))
    assert reason == "ops[0] (add_tool): no tool named 'rm_rf' exists"


def test_adding_an_attached_tool_is_refused() -> None:
    reason = refusal(patch(AddTool(name="send_message")))
    assert reason == "ops[0] (add_tool): tool 'send_message' is already attached"


def test_removing_an_absent_tool_is_refused() -> None:
    reason = refusal(patch(RemoveTool(name="web_search")))
    assert reason == "ops[0] (remove_tool): tool 'web_search' is not attached"


def test_tool_ops_are_checked_in_order() -> None:
    # The second add sees the tool the first one added.
    reason = refusal(patch(AddTool(name="web_search"), AddTool(name="web_search")))
    assert reason == "ops[1] (add_tool): tool 'web_search' is already attached"


def test_removing_an_absent_rule_is_refused() -> None:
    rule = {"type": "run_first", "tool_name": "conversation_search"}
    reason = refusal(patch(RemoveToolRule(rule=rule)))
    assert reason == (
        "ops[0] (remove_tool_rule): the rule"
        ' {"tool_name":"conversation_search","type":"run_first"} is not present'
    )


def test_adding_a_present_rule_is_refused_whatever_its_key_order() -> None:
    reason = refusal(patch(AddToolRule(rule={"tool_name": "send_message", "type": "exit_loop"})))
    assert reason.endswith("is already present")


def test_an_invalid_rule_is_refused() -> None:
    reason = refusal(patch(AddToolRule(rule={"type": "sometimes", "tool_name": "send_message"})))
    assert reason.startswith("ops[0] (add_tool_rule): tool_rules[0]: unknown type 'sometimes'")


def test_rules_that_conflict_after_the_patch_are_refused() -> None:
    rule = {"type": "continue_loop", "tool_name": "send_message"}
    reason = refusal(patch(AddToolRule(rule=rule)))
    assert reason == (
        "the patched tool rules are invalid:"
        " tool rules: 'send_message' cannot be both exit_loop and continue_loop"
    )


def test_check_patch_accepts_an_allowed_patch_and_spends_nothing() -> None:
    p = patch(AppendText(target="block:persona", text="I like maps."), AddTool(name="web_search"))
    check_patch(spec(), p, CONFIG, KNOWN_TOOLS)


# Applying


def test_replace_text_replaces_the_one_occurrence() -> None:
    child = apply_patch(
        spec(), patch(ReplaceText(target="system", old="helpful", new="terse")), CONFIG, KNOWN_TOOLS
    )
    assert child.system == "You are a terse assistant."
    assert child.blocks == spec().blocks


def test_replace_text_in_a_block() -> None:
    p = patch(ReplaceText(target="block:persona", old="Sam", new="Sal"))
    assert apply_patch(spec(), p, CONFIG, KNOWN_TOOLS).blocks == {"persona": "I am Sal."}


def test_replace_text_that_is_missing_is_refused() -> None:
    reason = refusal(patch(ReplaceText(target="system", old="rude", new="kind")))
    assert reason == "ops[0] (replace_text): text not found in system"


def test_replace_text_that_occurs_twice_is_ambiguous() -> None:
    base = spec(system="Be kind. Be brief.")
    reason = refusal(patch(ReplaceText(target="system", old="Be", new="Stay")), base)
    assert reason == "ops[0] (replace_text): the text is ambiguous: it occurs 2 times in system"


def test_append_text_adds_a_line() -> None:
    p = patch(AppendText(target="block:persona", text="I like maps."))
    child = apply_patch(spec(), p, CONFIG, KNOWN_TOOLS)
    assert child.blocks == {"persona": "I am Sam.\nI like maps."}


def test_append_text_to_empty_text_adds_no_separator() -> None:
    p = patch(AppendText(target="block:persona", text="I like maps."))
    child = apply_patch(spec(blocks={"persona": ""}), p, CONFIG, KNOWN_TOOLS)
    assert child.blocks == {"persona": "I like maps."}


def test_ops_apply_in_order() -> None:
    p = patch(
        AppendText(target="system", text="Be brief."),
        ReplaceText(target="system", old="brief", new="concise"),
    )
    child = apply_patch(spec(), p, CONFIG, KNOWN_TOOLS)
    assert child.system == "You are a helpful assistant.\nBe concise."


def test_tools_are_added_and_removed_and_kept_sorted() -> None:
    p = patch(AddTool(name="web_search"), AddTool(name="run_code"), RemoveTool(name="send_message"))
    child = apply_patch(spec(), p, CONFIG, KNOWN_TOOLS)
    assert child.tools == ["conversation_search", "run_code", "web_search"]


def test_tool_rules_are_added_and_removed() -> None:
    added = {"type": "max_count_per_step", "tool_name": "conversation_search", "max_count_limit": 2}
    p = patch(
        AddToolRule(rule=added),
        RemoveToolRule(rule={"tool_name": "send_message", "type": "exit_loop"}),
    )
    assert apply_patch(spec(), p, CONFIG, KNOWN_TOOLS).tool_rules == [added]


def test_model_settings_are_set_and_unset() -> None:
    p = patch(
        SetModelSetting(key="max_tokens", value=512),
        SetModelSetting(key="reasoning_effort", value="low"),
        SetModelSetting(key="temperature", value=None),
    )
    child = apply_patch(spec(), p, CONFIG, KNOWN_TOOLS)
    assert child.model_settings == {"max_tokens": 512, "reasoning_effort": "low"}


def test_applying_makes_a_new_version_and_leaves_the_parent() -> None:
    parent = spec()
    child = apply_patch(parent, patch(AddTool(name="web_search")), CONFIG, KNOWN_TOOLS)
    assert child.version_id != parent.version_id
    assert parent == spec()


def test_a_patch_may_grow_the_text_up_to_the_limit() -> None:
    config = EvolutionConfig(max_growth_chars=11)
    # "\n" and ten characters: eleven more.
    p = patch(AppendText(target="system", text="0123456789"))
    assert apply_patch(spec(), p, config, KNOWN_TOOLS).system.endswith("\n0123456789")


def test_a_patch_growing_the_text_past_the_limit_is_refused() -> None:
    config = EvolutionConfig(max_growth_chars=10)
    p = patch(
        AppendText(target="system", text="01234"), AppendText(target="block:persona", text="5678")
    )
    assert refusal(p, config=config) == (
        "the patch adds 11 characters to the system prompt and blocks; at most 10 allowed"
    )


def test_shrinking_text_is_never_refused_for_growth() -> None:
    config = EvolutionConfig(max_growth_chars=0)
    p = patch(ReplaceText(target="system", old=" helpful", new=""))
    assert apply_patch(spec(), p, config, KNOWN_TOOLS).system == "You are a assistant."


# Diffs


def test_diff_of_the_system_prompt() -> None:
    parent = spec(system="Line one.\nLine two.")
    child = spec(system="Line one.\nLine 2.")
    assert diff(parent, child) == [
        FieldDiff(
            field="system",
            unified=(
                f"--- {parent.version_id}\n+++ {child.version_id}\n"
                "@@ -1,2 +1,2 @@\n Line one.\n-Line two.\n+Line 2.\n"
            ),
        )
    ]


def test_diff_of_tools_is_one_tool_per_line() -> None:
    parent = spec()
    child = apply_patch(parent, patch(AddTool(name="web_search")), CONFIG, KNOWN_TOOLS)
    assert diff(parent, child) == [
        FieldDiff(
            field="tools",
            unified=(
                f"--- {parent.version_id}\n+++ {child.version_id}\n"
                "@@ -1,2 +1,3 @@\n conversation_search\n send_message\n+web_search\n"
            ),
        )
    ]


def test_diff_names_each_changed_field_in_order() -> None:
    parent = spec()
    p = patch(
        SetModelSetting(key="temperature", value=0.2),
        AppendText(target="block:persona", text="x"),
        AddToolRule(rule={"type": "run_first", "tool_name": "conversation_search"}),
    )
    child = apply_patch(parent, p, CONFIG, KNOWN_TOOLS)
    diffs = diff(parent, child)
    assert [d.field for d in diffs] == ["block:persona", "tool_rules", "model_settings"]
    assert '-  "temperature": 0.7\n+  "temperature": 0.2\n' in diffs[2].unified
    assert '+{"tool_name":"conversation_search","type":"run_first"}\n' in diffs[1].unified


def test_diff_sees_a_trailing_newline() -> None:
    assert [d.field for d in diff(spec(system="a"), spec(system="a\n"))] == ["system"]


def test_diff_of_equal_versions_is_empty() -> None:
    assert diff(spec(), spec()) == []


# Building a spec from an agent


def test_spec_from_agent_keeps_only_evolvable_blocks_and_patchable_settings() -> None:
    config = EvolutionConfig(evolvable_blocks=["persona", "style"])
    built = spec_from_agent(
        system="Hi.",
        blocks={"persona": "P", "human": "Ada", "style": "S", "notes": "N"},
        tools=["web_search", "send_message"],
        tool_rules=[{"type": "exit_loop", "tool_name": "send_message"}],
        llm_config={
            "model": "gpt-5",
            "temperature": 0.5,
            "max_tokens": None,
            "reasoning_effort": "low",
            "context_window": 128000,
        },
        config=config,
    )
    assert built == VersionSpec(
        system="Hi.",
        blocks={"persona": "P", "style": "S"},
        tools=["send_message", "web_search"],
        tool_rules=[{"type": "exit_loop", "tool_name": "send_message"}],
        model_settings={"temperature": 0.5, "reasoning_effort": "low"},
    )


# Travelling in events


def test_a_patch_round_trips_through_json() -> None:
    p = Patch(
        ops=[
            ReplaceText(target="system", old="a", new="b"),
            AppendText(target="block:persona", text="c"),
            AddTool(name="web_search"),
            RemoveTool(name="send_message"),
            AddToolRule(rule={"type": "run_first", "tool_name": "web_search"}),
            RemoveToolRule(rule={"type": "exit_loop", "tool_name": "send_message"}),
            SetModelSetting(key="max_tokens", value=256),
            SetModelSetting(key="temperature", value=0.25),
            SetModelSetting(key="reasoning_effort", value="low"),
            SetModelSetting(key="top_p", value=None),
        ],
        rationale="because",
    )
    dumped = p.model_dump(mode="json")
    assert dumped["ops"][2] == {"op": "add_tool", "name": "web_search"}
    again = Patch.model_validate(dumped)
    assert again == p
    assert [type(op) for op in again.ops] == [type(op) for op in p.ops]
    assert Patch.model_validate_json(p.model_dump_json()) == p


def test_an_unknown_op_is_a_validation_error() -> None:
    with pytest.raises(ValidationError, match="does not match any of the expected tags"):
        Patch.model_validate({"ops": [{"op": "rewrite", "target": "system"}]})
