"""Where deploy/ is, and the preloadable stand-ins tests/cli builds (ctest passes the paths)."""
import os
from pathlib import Path

import pytest


def _from_ctest(name):
    value = os.environ.get(name)
    if not value:
        pytest.fail(f"{name} is not set: run these tests through ctest, which sets it")
    return Path(value)


@pytest.fixture(scope="session")
def deploy_dir():
    return _from_ctest("CUSLICE_DEPLOY_DIR")


@pytest.fixture(scope="session")
def hook():
    return _from_ctest("CUSLICE_TEST_HOOK")


@pytest.fixture(scope="session")
def other_preload():
    return _from_ctest("CUSLICE_TEST_OTHER_PRELOAD")
