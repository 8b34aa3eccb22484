"""`cuslice cdi generate`: what the spec contains and where it goes."""
import json
import os
import stat


def generate(run_cuslice, hook, *args):
    result = run_cuslice("cdi", "generate", "--hook-path", hook, *args)
    assert result.returncode == 0, result.stderr
    return result


def test_the_spec_mounts_the_hook_read_only_and_preloads_it(run_cuslice, hook):
    spec = json.loads(generate(run_cuslice, hook).stdout)
    assert spec["kind"] == "cuslice.io/gpu"
    [device] = spec["devices"]
    assert device["name"] == "all"
    edits = device["containerEdits"]
    [hook_mount] = [m for m in edits["mounts"] if m["hostPath"] == str(hook)]
    assert "ro" in hook_mount["options"] and "bind" in hook_mount["options"]
    assert f"LD_PRELOAD={hook_mount['containerPath']}" in edits["env"]


def test_the_spec_mounts_the_socket_directory_and_names_the_socket(run_cuslice, hook):
    spec = json.loads(generate(run_cuslice, hook, "--socket-dir", "/var/run/cs/").stdout)
    edits = spec["devices"][0]["containerEdits"]
    [socket_mount] = [m for m in edits["mounts"] if m["hostPath"] == "/var/run/cs"]
    assert f"CUSLICE_SOCKET={socket_mount['containerPath']}/cuslice.sock" in edits["env"]


def test_the_spec_shares_only_the_schedulers_segment_from_dev_shm(run_cuslice, hook):
    for args, path in (([], "/dev/shm/cuslice"), (["--shm-name", "/cs2"], "/dev/shm/cs2")):
        spec = json.loads(generate(run_cuslice, hook, *args).stdout)
        mounts = spec["devices"][0]["containerEdits"]["mounts"]
        shm = [m for m in mounts if m["hostPath"].startswith("/dev/shm")]
        assert shm == [
            {"hostPath": path, "containerPath": path, "options": shm[0]["options"]}
        ]


def test_the_device_name_can_be_chosen(run_cuslice, hook):
    spec = json.loads(generate(run_cuslice, hook, "--device-name", "slot0").stdout)
    assert spec["devices"][0]["name"] == "slot0"


def test_output_writes_the_same_spec_readable_by_all_and_leaves_no_temporary(
    run_cuslice, hook, tmp_path
):
    printed = generate(run_cuslice, hook).stdout
    target = tmp_path / "cuslice.json"
    target.write_text("old")
    result = generate(run_cuslice, hook, "--output", target)
    assert result.stdout == ""
    assert target.read_text() == printed
    assert stat.S_IMODE(target.stat().st_mode) == 0o644
    assert os.listdir(tmp_path) == ["cuslice.json"]


def test_an_unwritable_output_fails_with_the_reason(run_cuslice, hook, tmp_path):
    target = tmp_path / "no-such-dir" / "cuslice.json"
    result = run_cuslice("cdi", "generate", "--hook-path", hook, "--output", target)
    assert result.returncode == 1
    assert result.stderr.startswith(f"cuslice cdi generate: cannot write {target}: ")
    assert "No such file or directory" in result.stderr


def test_the_hook_must_exist(run_cuslice, tmp_path):
    result = run_cuslice("cdi", "generate", "--hook-path", tmp_path / "libcuslice.so")
    assert result.returncode == 1
    assert "--hook-path" in result.stderr and result.stdout == ""


def test_bad_options_are_usage_errors(run_cuslice, hook):
    for args in (
        ["--socket-dir", "run/cuslice"],
        ["--device-name", "a/b"],
        ["--shm-name", "cuslice"],
        ["--bogus"],
    ):
        result = run_cuslice("cdi", "generate", "--hook-path", hook, *args)
        assert result.returncode == 2, (args, result.stderr)
        assert result.stderr.startswith("cuslice cdi generate: "), result.stderr
        assert result.stdout == ""


def test_cdi_alone_asks_for_a_subcommand(run_cuslice):
    result = run_cuslice("cdi")
    assert result.returncode == 2
    assert result.stderr.startswith("cuslice cdi: ")
