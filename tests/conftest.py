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


@pytest.fixture(autouse=True, scope="session")
def _private_ceilings_cache(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Tests never read or write the user's ceilings cache (predictions and goldens would depend on it)."""
    if "LAUNCHPROBE_TESTS_USE_USER_CACHE" not in os.environ:
        os.environ["XDG_CACHE_HOME"] = str(tmp_path_factory.mktemp("cache"))
