"""Shared pytest options. Golden files (tests/golden/) are rewritten with --update-goldens or
LAUNCHPROBE_UPDATE_GOLDENS=1."""

from __future__ import annotations

import os

import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--update-goldens", action="store_true", help="rewrite tests/golden/* from the current output")


@pytest.fixture
def update_goldens(request: pytest.FixtureRequest) -> bool:
    return bool(request.config.getoption("--update-goldens") or os.environ.get("LAUNCHPROBE_UPDATE_GOLDENS"))
