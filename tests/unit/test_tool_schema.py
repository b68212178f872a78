"""A tool's JSON schema comes from its source as Letta derives it; bad source says what to fix."""

from __future__ import annotations

import pytest

from o_gateway.tool_schema import ToolSourceError, derive_schema

ROLL = '''
from typing import Literal, Optional

def _helper() -> None:
    pass

def roll_dice(sides: int, times: Optional[int] = 1, mode: Literal["sum", "max"] = "sum",
              labels: list[str] | None = None, agent_state: "object" = None) -> str:
    """Roll some dice.

    Rolls `times` dice with `sides` sides each.

    Args:
        sides (int): Number of sides per die.
        times: How many dice to roll.
        mode: How to combine the rolls.
        labels: Names for the dice.

    Returns:
        str: The result.
    """
    return "4"
'''


def test_schema_from_signature_and_google_docstring() -> None:
    assert derive_schema(ROLL) == {
        "name": "roll_dice",
        "description": "Roll some dice.\n\nRolls `times` dice with `sides` sides each.",
        "parameters": {
            "type": "object",
            "properties": {
                "sides": {"type": "integer", "description": "Number of sides per die."},
                "times": {"type": "integer", "description": "How many dice to roll."},
                "mode": {
                    "type": "string",
                    "enum": ["sum", "max"],
                    "description": "How to combine the rolls.",
                },
                "labels": {
                    "type": "array",
                    "items": {"type": "string"},
                    "description": "Names for the dice.",
                },
            },
            "required": ["sides"],
        },
    }


def test_a_named_function_is_chosen_over_the_last_one() -> None:
    schema = derive_schema(
        'def a(x: float):\n    """A.\n\n    Args:\n        x: X.\n    """\n\n'
        'def b():\n    """B."""\n',
        name="a",
    )
    assert schema["parameters"]["properties"] == {"x": {"type": "number", "description": "X."}}


@pytest.mark.parametrize(
    ("source", "message"),
    [
        ("def broken(:\n", "does not parse"),
        ("x = 1\n", "no top-level function"),
        ('def f(x):\n    """F.\n\n    Args:\n        x: X.\n    """\n', "no type annotation"),
        ('def f(*xs: int):\n    """F."""\n', "*args and **kwargs"),
        (
            'def f(x: int | str):\n    """F.\n\n    Args:\n        x: X.\n    """\n',
            "cannot be expressed",
        ),
        (
            'def f(x: set[int]):\n    """F.\n\n    Args:\n        x: X.\n    """\n',
            "cannot be expressed",
        ),
        ('def f(x: int):\n    """F."""\n', "not described"),
        ("def f(x: int):\n    pass\n", "needs a docstring"),
    ],
)
def test_source_that_cannot_be_a_tool_is_refused_with_the_reason(source: str, message: str) -> None:
    with pytest.raises(ToolSourceError, match=message.replace("*", r"\*")):
        derive_schema(source)
