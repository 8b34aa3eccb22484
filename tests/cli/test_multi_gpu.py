"""Tenants of different GPUs of one node, through `cuslice run --gpus`: shares are counted on
each GPU a tenant uses, so a node gives out 100% of every GPU, not 100% once."""
import json

import pytest

from scheduler_harness import FakeProcess


@pytest.fixture
def socket_path(tmp_path):
    return tmp_path / "run" / "cuslice.sock"


def run_prefix(cuslice_bin, hook, socket_path, *flags):
    return (cuslice_bin, "run", "--hook", hook, "--socket", socket_path, *flags, "--")


def status(run_cuslice, socket_path):
    result = run_cuslice("status", "--json", "--socket", socket_path)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_shares_of_different_gpus_run_side_by_side(run_cuslice, cuslice_bin, hook, socket_path):
    def tenant(name, share, gpus):
        # Each reports its card, as a hook does after cuInit: the GPU shows in status.
        return FakeProcess(socket_path, None, "--gpu", gpus, "--memory-total", 80 << 30, "--reserve", 1 << 20,
                           env={"CUSLICE_TENANT": ""},
                           command_prefix=run_prefix(cuslice_bin, hook, socket_path, "--tenant", name,
                                                     "--share", share, "--gpus", gpus))

    processes = [tenant("a", "70%", "1"), tenant("b", "30%", "1"), tenant("c", "50%", "0")]
    try:
        tenants = {t["name"]: t for t in status(run_cuslice, socket_path)["tenants"]}
        assert {name: tenants[name]["pids"] for name in "abc"} == {
            "a": [processes[0].pid], "b": [processes[1].pid], "c": [processes[2].pid]}
        # Each GPU lists its own tenants only, with their share of it.
        gpus = {g["index"]: {t["name"]: t for t in g["tenants"]} for g in status(run_cuslice, socket_path)["gpus"]}
        assert set(gpus) == {0, 1}
        assert set(gpus[0]) == {"c"} and set(gpus[1]) == {"a", "b"}
        assert gpus[1]["a"]["share"] == pytest.approx(0.7) and gpus[1]["b"]["share"] == pytest.approx(0.3)
        assert gpus[0]["c"]["share"] == pytest.approx(0.5) and gpus[0]["c"]["allowed"]
        assert gpus[1]["a"]["memory_used_bytes"] == 1 << 20
        table = run_cuslice("status", "--socket", socket_path)
        assert table.returncode == 0, table.stderr
        gpu0 = table.stdout[table.stdout.index("GPU 0"):table.stdout.index("GPU 1")]
        assert "c " in gpu0 and " a " not in gpu0 and " b " not in gpu0
        # GPU 1 is full; GPU 0 has 50% left; a tenant of both GPUs is over on GPU 1.
        def attempt(*flags):
            return run_cuslice(*run_prefix(cuslice_bin, hook, socket_path, *flags)[1:], "true",
                               env={"CUSLICE_AUTO_START": "1"})

        over = attempt("--tenant", "d", "--share", "10%", "--gpus", "1")
        assert over.returncode == 1
        assert "the shares of the tenants on GPU 1 would add up to 110%, more than 100%" in over.stderr
        everywhere = attempt("--tenant", "e", "--share", "10%")
        assert everywhere.returncode == 1
        assert "GPU 1 would add up to 110%" in everywhere.stderr
        fits = attempt("--tenant", "f", "--share", "50%", "--gpus", "0")
        assert fits.returncode == 0, fits.stderr
        # The same name on other GPUs is another tenant: refused, saying which.
        other = attempt("--tenant", "a", "--share", "70%", "--gpus", "0")
        assert other.returncode == 1
        assert "GPUs 1 (asked: 0)" in other.stderr
    finally:
        for p in processes:
            p.close()
