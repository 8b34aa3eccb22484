"""`cmake --install`: what lands where, and that the installed tools find each other."""
import os
import re
import subprocess
from pathlib import Path

import pytest


@pytest.fixture(scope="module")
def prefix(tmp_path_factory):
    build = os.environ.get("CUSLICE_BUILD_DIR")
    if not build:
        pytest.fail("CUSLICE_BUILD_DIR is not set: run these tests through ctest, which sets it")
    root = tmp_path_factory.mktemp("prefix")
    subprocess.run(["cmake", "--install", build, "--prefix", str(root)], check=True,
                   capture_output=True, text=True, timeout=60)
    return root


def test_programs_unit_wrapper_and_example_are_installed(prefix):
    for path, executable in [
        ("bin/cuslice", True),
        ("bin/cuslice-scheduler", True),
        ("bin/cuslice-device-plugin", True),
        ("share/cuslice/cuslice-entrypoint.sh", True),
        ("share/cuslice/cuslice.example.yaml", False),
        ("lib/systemd/system/cuslice-scheduler.service", False),
    ]:
        file = prefix / path
        assert file.is_file(), path
        assert os.access(file, os.X_OK) == executable, path


def test_the_example_configuration_is_valid(prefix):
    result = subprocess.run([prefix / "bin/cuslice", "config", "check",
                             prefix / "share/cuslice/cuslice.example.yaml"],
                            capture_output=True, text=True, timeout=30)
    assert result.returncode == 0, result.stderr


def test_installed_cuslice_starts_the_scheduler_beside_it(prefix, hook, tmp_path):
    socket = tmp_path / "s.sock"
    result = subprocess.run(
        [prefix / "bin/cuslice", "run", "--hook", hook, "--socket", socket, "--", "env"],
        env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")},
        capture_output=True, text=True, timeout=30,
    )
    assert result.returncode == 0, result.stderr
    # The command's own tenant: the program's name and the command's pid.
    assert re.search(r"^CUSLICE_TENANT=env-[0-9]+$", result.stdout, re.M), result.stdout
    log = Path(f"{socket}.log").read_text()
    assert "tenants from `cuslice run`" in log
