"""A prepared claim's CDI spec carries the claim's credential (CUSLICE_TENANT=<tenant>:<key>):
whoever reads it can join the claim's tenant. The container runtime reads it as root, so the
driver writes it readable by its own user alone (0600), also over a spec an older driver left
readable, and refuses a CDI directory other users could write (they could replace the specs).

The CDI directory here is world-traversable (as /var/run/cdi is), so that only the file's own
mode keeps another user out. Run as root (ctest in CI), another uid really tries to read it.
"""
import os
import shutil
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from dra_harness import DEADLINE, claim, make_node, wait_for  # noqa: F401

NOBODY = 65534

READ_AS_NOBODY = r"""
import os, sys
os.setgroups([])
os.setgid(int(sys.argv[2]))
os.setuid(int(sys.argv[2]))
try:
    open(sys.argv[1]).read()
except PermissionError:
    sys.exit(3)
sys.exit(0)
"""


@pytest.fixture
def open_cdi_dir():
    """A CDI directory of this user's, mode 0755 in /tmp: others may enter it and list it."""
    path = Path(tempfile.mkdtemp(prefix="cuslice-cdi-test-", dir="/tmp"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def spec_path(cdi, c):
    return cdi / f"gpu.cuslice.io-claim_{c['metadata']['uid']}.json"


def prepared(node, name):
    node.wait_slice(1)
    c = node.allocate(claim(name, [("gpu", "gpu-0", "4Gi", "30", "s")], pod=f"{name}-0"))
    assert node.kubelet.prepare(c)[c["metadata"]["uid"]]["error"] == ""
    return c


def test_a_claims_cdi_spec_is_readable_by_its_owner_alone(make_node, open_cdi_dir):
    node = make_node(gpus=1, cdi_dir=open_cdi_dir)
    c = prepared(node, "private")
    path = spec_path(open_cdi_dir, c)
    assert "CUSLICE_TENANT=dra-" in path.read_text()
    st = path.stat()
    assert stat.S_IMODE(st.st_mode) == 0o600, oct(st.st_mode)
    assert st.st_uid == os.geteuid()
    # Nothing else in the directory holds the key (a temporary file left behind).
    for other in open_cdi_dir.iterdir():
        if other != path:
            assert "CUSLICE_TENANT" not in other.read_text(), other
    if os.geteuid() != 0:
        pytest.skip("not root: cannot try the read as another uid (the mode check above passed)")
    read = subprocess.run([sys.executable, "-c", READ_AS_NOBODY, str(path), str(NOBODY)],
                          capture_output=True, text=True, timeout=DEADLINE)
    assert read.returncode == 3, f"uid {NOBODY} could read the claim's credential: {read.stderr}"


def test_a_spec_left_readable_by_an_older_driver_is_closed_when_prepared_again(make_node, open_cdi_dir):
    node = make_node(gpus=1, cdi_dir=open_cdi_dir)
    c = prepared(node, "older")
    path = spec_path(open_cdi_dir, c)
    path.chmod(0o644)  # as a driver before this one wrote it; its content is the same
    assert node.kubelet.prepare(c)[c["metadata"]["uid"]]["error"] == ""  # the kubelet repeats it
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_a_cdi_directory_other_users_can_write_is_refused(make_node, open_cdi_dir):
    node = make_node(gpus=1, cdi_dir=open_cdi_dir)
    node.wait_slice(1)
    node.stop_plugin()
    open_cdi_dir.chmod(0o777)
    node.launch()
    assert node.plugin.wait(timeout=DEADLINE) == 1
    log = node.plugin_logs[-1].read_text()
    assert f"--cdi-dir {open_cdi_dir} is writable by other users" in log, log
    # Closed again, the driver starts.
    open_cdi_dir.chmod(0o755)
    node.start_plugin()
    wait_for("the driver to run", lambda: node.plugin.poll() is None)
