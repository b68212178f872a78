from __future__ import annotations

import pytest


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "chaos: loads a whole O system while SIGKILLing its processes (minutes)"
    )
