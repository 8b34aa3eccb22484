"""Shared fixtures for the end-to-end tests of the `cuslice` binary.

ctest passes the paths of what it built through the environment (see CMakeLists.txt). Each
test starts the binary with a minimal environment of its own, so that nothing the developer
has exported (LD_PRELOAD, CUSLICE_HOOK_PATH) changes the result.
"""
import os
import subprocess
import sys
from pathlib import Path

import pytest

# The scheduler harness (tests/scheduler/scheduler_harness.py) is shared with the daemon's
# own end-to-end tests.
if os.environ.get("CUSLICE_HARNESS_DIR"):
    sys.path.insert(0, os.environ["CUSLICE_HARNESS_DIR"])


def _built(name):
    value = os.environ.get(name)
    if not value:
        pytest.fail(f"{name} is not set: run these tests through ctest, which sets it")
    return Path(value)


@pytest.fixture(scope="session")
def cuslice_bin():
    return _built("CUSLICE_BIN")


@pytest.fixture(scope="session")
def hook():
    """A preloadable stand-in named libcuslice.so."""
    return _built("CUSLICE_TEST_HOOK")


@pytest.fixture(scope="session")
def other_preload():
    """A preloadable library that is not the hook, as a user's own LD_PRELOAD entry."""
    return _built("CUSLICE_TEST_OTHER_PRELOAD")


@pytest.fixture
def run_cuslice(cuslice_bin):
    """Runs cuslice with `args` and only PATH plus `env` in its environment.

    `cuslice run` would start a scheduler on the node's socket when none answers; these
    tests never do that unless they ask (CUSLICE_AUTO_START in `env`, with their own socket).
    """

    def run(*args, env=None, binary=None, cwd=None):
        full_env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "CUSLICE_AUTO_START": "0"}
        full_env.update(env or {})
        return subprocess.run(
            [str(binary or cuslice_bin), *map(str, args)],
            env=full_env,
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=30,
        )

    return run
