"""`cuslice version` and `cuslice-scheduler --version` name the protocols they speak, with
the numbers of the headers they were built from."""
import os
import re
import subprocess
from pathlib import Path

SOURCE = Path(os.environ.get("CUSLICE_SOURCE_DIR", Path(__file__).resolve().parents[2]))


def constant(header, name):
    text = (SOURCE / "protocol" / header).read_text()
    return int(re.search(rf"\b{name} = (\d+);", text).group(1))


def expected_protocol_lines():
    return [
        f"shared segment ABI {constant('shm_protocol.h', 'kAbiMajor')}.{constant('shm_protocol.h', 'kAbiMinor')}",
        f"socket protocol: registration {constant('socket_protocol.h', 'kVersion')}, "
        f"control {constant('socket_protocol.h', 'kControlVersion')}",
    ]


def project_version():
    text = (SOURCE / "CMakeLists.txt").read_text()
    return re.search(r"project\(cuslice VERSION ([0-9.]+)", text).group(1)


def test_cuslice_version_names_the_abi_it_speaks(run_cuslice):
    result = run_cuslice("version")
    assert result.returncode == 0
    assert result.stdout.splitlines() == [f"cuslice {project_version()}", *expected_protocol_lines()]
    assert run_cuslice("--version").stdout == result.stdout


def test_scheduler_version_names_the_same_abi():
    result = subprocess.run([os.environ["CUSLICE_SCHEDULER_BIN"], "--version"], capture_output=True, text=True,
                            timeout=30, env={"PATH": "/usr/bin:/bin"})
    assert result.returncode == 0
    assert result.stdout.splitlines() == [f"cuslice-scheduler {project_version()}", *expected_protocol_lines()]
