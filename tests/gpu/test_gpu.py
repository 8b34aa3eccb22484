"""pytest entry to the GPU proof suite (tests/gpu/suite.py), one test per scenario.

Skips cleanly where there is no NVIDIA GPU, no nvcc, or no hook: CI machines have none.

    pytest tests/gpu/test_gpu.py                       # builds the hook and programs first
    CUSLICE_HOOK=build-gpu/hook/libcuslice.so pytest tests/gpu/test_gpu.py -k torch
"""
import os
import shutil
import subprocess

import pytest

import suite

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
BUILD = os.path.join(ROOT, "build-gpu")


def _gpu_present():
    if shutil.which("nvidia-smi") is None:
        return False
    try:
        return subprocess.run(["nvidia-smi", "-L"], capture_output=True, timeout=30).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


@pytest.fixture(scope="session")
def built():
    if not _gpu_present():
        pytest.skip("no NVIDIA GPU / nvidia-smi on this machine")
    if shutil.which("nvcc") is None:
        pytest.skip("no nvcc on this machine")
    hook = os.environ.get("CUSLICE_HOOK")
    bin_dir = os.path.join(BUILD, "gpu-tests")
    if not hook or not os.path.exists(os.path.join(bin_dir, "cuda_quota_ptds")):
        # run.sh with a scenario name that matches nothing builds everything and runs nothing.
        p = subprocess.run(["bash", os.path.join(HERE, "run.sh"), "--only", "<build only>"],
                           capture_output=True, text=True)
        for line in p.stdout.splitlines():
            if line.startswith("hook: "):
                hook = hook or line[len("hook: "):].strip()
        if not hook or not os.path.exists(hook):
            pytest.fail("could not build the hook:\n" + p.stdout[-3000:] + p.stderr[-3000:])
    return hook, bin_dir


@pytest.mark.parametrize("scenario", suite.SCENARIOS, ids=[s.name for s in suite.SCENARIOS])
def test_scenario(built, scenario, tmp_path):
    hook, bin_dir = built
    lines = []
    r = suite.run_scenario(scenario, hook, bin_dir, lines.append)
    failed = [k for k, v in r["checks"].items() if not v]
    assert r["pass"], f"{scenario.name}: failed {failed}; notes: {r.get('notes')}\n" + "\n".join(lines)[-4000:]
