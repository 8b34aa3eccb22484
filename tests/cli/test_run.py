"""`cuslice run`: the environment it gives the command, and the statuses it returns."""
import os
import shutil
import signal
import stat

import pytest


def child_env(result):
    """The environment the child printed with `env`, as a dict."""
    assert result.returncode == 0, result.stderr
    return dict(line.split("=", 1) for line in result.stdout.splitlines() if "=" in line)


# --- LD_PRELOAD -------------------------------------------------------------------------


def test_hook_becomes_ld_preload_when_there_was_none(run_cuslice, hook):
    env = child_env(run_cuslice("run", "--hook", hook, "--", "env"))
    assert env["LD_PRELOAD"] == str(hook)


def test_existing_ld_preload_is_kept_and_the_hook_appended_once(run_cuslice, hook, other_preload):
    result = run_cuslice(
        "run", "--hook", hook, "--", "env", env={"LD_PRELOAD": str(other_preload)}
    )
    assert child_env(result)["LD_PRELOAD"] == f"{other_preload}:{hook}"


def test_running_under_cuslice_twice_does_not_add_the_hook_twice(
    run_cuslice, cuslice_bin, hook, other_preload
):
    result = run_cuslice(
        "run", "--hook", hook, "--", cuslice_bin, "run", "--hook", hook, "--", "env",
        env={"LD_PRELOAD": str(other_preload)},
    )
    preload = child_env(result)["LD_PRELOAD"]
    assert preload == f"{other_preload}:{hook}"
    assert preload.count("libcuslice.so") == 1


def test_the_hook_is_really_loaded_into_the_command(run_cuslice, hook, other_preload):
    result = run_cuslice(
        "run", "--hook", hook, "--", "cat", "/proc/self/maps",
        env={"LD_PRELOAD": str(other_preload)},
    )
    assert result.returncode == 0, result.stderr
    assert str(hook) in result.stdout
    assert str(other_preload) in result.stdout
    assert result.stderr == ""  # ld.so complains on stderr about entries it cannot load


# --- the variables the hook and the scheduler read --------------------------------------


def test_options_become_the_environment_the_hook_reads(run_cuslice, hook):
    env = child_env(
        run_cuslice(
            "run", "--hook", hook, "--memory", "4GiB", "--tenant", "training",
            "--gpus", "0,GPU-1234,MIG-5c4a0b2e,MIG-GPU-8f6b0c1e-77aa/1/0", "--log-level", "debug", "--", "env",
        )
    )
    assert env["CUSLICE_MEMORY_LIMIT"] == "4GiB"
    assert env["CUSLICE_TENANT"] == "training"
    assert env["CUDA_VISIBLE_DEVICES"] == "0,GPU-1234,MIG-5c4a0b2e,MIG-GPU-8f6b0c1e-77aa/1/0"
    assert env["CUSLICE_LOG_LEVEL"] == "debug"
    # Nothing reads these: the scheduling flags go to the scheduler, not the environment.
    assert not {"CUSLICE_SHARE", "CUSLICE_COMPUTE_LIMIT", "CUSLICE_PRIORITY"} & env.keys()


@pytest.mark.parametrize("flags", [["--share", "60%"], ["--limit", "80.5%"], ["--priority", "high"],
                                   ["--share", "10%", "--priority", "low"]])
def test_scheduling_flags_without_a_scheduler_are_refused_not_dropped(run_cuslice, hook, tmp_path, flags):
    marker = tmp_path / "ran"
    result = run_cuslice("run", "--hook", hook, "--socket", tmp_path / "none.sock", *flags, "--", "touch", marker,
                         env={"CUSLICE_AUTO_START": "0"})
    assert result.returncode == 2, result.stderr
    first, hint = result.stderr.splitlines()
    assert first.startswith("cuslice run: " + " ".join(flags[:2]))
    assert "needs a scheduler, and none answers on " + str(tmp_path / "none.sock") in first
    assert "CUSLICE_AUTO_START=0" in first
    assert hint.strip().startswith("drop " + flags[0])
    assert not marker.exists()


def test_percent_memory_is_passed_through(run_cuslice, hook):
    env = child_env(run_cuslice("run", "--hook", hook, "--memory", "25%", "--", "env"))
    assert env["CUSLICE_MEMORY_LIMIT"] == "25%"


def test_unset_options_leave_the_environment_alone(run_cuslice, hook):
    env = child_env(run_cuslice("run", "--hook", hook, "--", "env", env={"CUSLICE_TENANT": "mine"}))
    assert env["CUSLICE_TENANT"] == "mine"
    assert "CUSLICE_MEMORY_LIMIT" not in env
    assert "CUDA_VISIBLE_DEVICES" not in env


def test_arguments_after_the_double_dash_belong_to_the_command(run_cuslice, hook):
    result = run_cuslice("run", "--hook", hook, "--", "echo", "--memory", "--", "-x")
    assert result.returncode == 0, result.stderr
    assert result.stdout == "--memory -- -x\n"


# --- usage errors: exit 2, a message naming the problem, nothing run ----------------------


# Every flag of `run`: the message names the flag, the value and what is accepted.
@pytest.mark.parametrize(
    "args, expected",
    [
        (["--memory", "4 furlongs"], ["--memory", '"4 furlongs"', "unknown unit", "4GiB", "4Gi", "4G"]),
        (["--memory", "4 GiB"], ["--memory", '"4 GiB"', "no space"]),
        (["--memory", "lots"], ["--memory", '"lots"', "4GiB"]),
        (["--memory", "4"], ["--memory", '"4"', "a unit is needed", "4GiB"]),
        (["--memory", "4gb"], ["--memory", '"4gb"', "case-sensitive"]),
        (["--memory", "0GiB"], ["--memory", '"0GiB"', "above zero"]),
        (["--memory", "-1GiB"], ["--memory", '"-1GiB"', "no sign"]),
        (["--memory", "1e30B"], ["--memory", '"1e30B"', "unknown unit"]),
        (["--memory", "99999999999999999999999B"], ["--memory", "too large"]),
        (["--memory", "150%"], ["--memory", '"150%"', "at most 100%"]),
        (["--share", "60"], ["--share", '"60"', "written with %", "60%"]),
        (["--share", "150%"], ["--share", '"150%"', "at most 100%"]),
        (["--share", "0%"], ["--share", '"0%"', "above 0%"]),
        (["--limit", "lots"], ["--limit", '"lots"', "60%"]),
        (["--share", "60%", "--limit", "50%"], ["--limit", "below", "--share"]),
        (["--priority", "urgent"], ["--priority", "urgent", "high,normal,low"]),
        (["--log-level", "chatty"], ["--log-level", "chatty", "off,error,warn,info,debug"]),
        (["--gpus", "0,,1"], ["--gpus", '"0,,1"', "empty entry", "GPU-"]),
        (["--gpus", "foo"], ["--gpus", '"foo"', "not a GPU index or UUID", "0,1"]),
        (["--gpus", "0,foo"], ["--gpus", '"foo" in "0,foo"']),
        (["--gpus", "GPU-xyz"], ["--gpus", '"GPU-xyz"']),
        (["--gpus", "GPU-"], ["--gpus", '"GPU-"']),
        (["--gpus", "MIG-GPU-"], ["--gpus", '"MIG-GPU-"']),
        (["--gpus", ""], ["--gpus", "empty"]),
        (["--tenant", ""], ["--tenant", "tenant name"]),
        (["--tenant", "a/b"], ["--tenant", '"a/b"', "letters, digits"]),
        (["--tenant", "x" * 64], ["--tenant", "1 to 63"]),
        (["--socket", ""], ["--socket", "empty"]),
        (["--socket", "/tmp/" + "s" * 120], ["--socket", "at most 107"]),
        (["--no-such-option"], ["--no-such-option"]),
    ],
)
def test_bad_options_are_usage_errors_and_run_nothing(run_cuslice, hook, tmp_path, args, expected):
    marker = tmp_path / "ran"
    result = run_cuslice("run", "--hook", hook, *args, "--", "touch", marker)
    assert result.returncode == 2, result.stderr
    assert result.stderr.startswith("cuslice run: "), result.stderr
    for word in expected:
        assert word in result.stderr
    assert len(result.stderr.splitlines()) == 2  # the problem, then what to do about it
    assert result.stdout == ""
    assert not marker.exists()


def test_a_missing_command_is_a_usage_error(run_cuslice, hook):
    result = run_cuslice("run", "--hook", hook)
    assert result.returncode == 2
    assert "CMD" in result.stderr


def test_no_subcommand_is_a_usage_error(run_cuslice):
    result = run_cuslice()
    assert result.returncode == 2
    assert result.stderr.startswith("cuslice: ")


# --- the command's status ---------------------------------------------------------------


@pytest.mark.parametrize("status", [0, 1, 3, 42, 255])
def test_the_commands_exit_status_is_returned(run_cuslice, hook, status):
    result = run_cuslice("run", "--hook", hook, "--", "sh", "-c", f"exit {status}")
    assert result.returncode == status


def test_a_signal_that_kills_the_command_reaches_the_caller(run_cuslice, hook):
    result = run_cuslice("run", "--hook", hook, "--", "sh", "-c", "kill -TERM $$")
    assert result.returncode == -signal.SIGTERM


def test_a_shell_reports_128_plus_the_signal(run_cuslice, cuslice_bin, hook):
    script = f'"{cuslice_bin}" run --hook "{hook}" -- sh -c \'kill -KILL $$\'; echo "status $?"'
    result = run_cuslice("run", "--hook", hook, "--", "sh", "-c", script)
    assert result.stdout.strip() == f"status {128 + signal.SIGKILL}"


def test_a_command_not_found_exits_127(run_cuslice, hook):
    result = run_cuslice("run", "--hook", hook, "--", "cuslice-test-no-such-command")
    assert result.returncode == 127
    assert "cuslice-test-no-such-command: command not found" in result.stderr
    assert "PATH" in result.stderr


def test_a_command_that_cannot_be_executed_exits_126(run_cuslice, hook, tmp_path):
    script = tmp_path / "not-executable"
    script.write_text("#!/bin/sh\nexit 0\n")
    script.chmod(stat.S_IRUSR | stat.S_IWUSR)
    result = run_cuslice("run", "--hook", hook, "--", script)
    if os.geteuid() == 0 and result.returncode == 0:
        pytest.skip("root may execute files without an execute bit on this filesystem")
    assert result.returncode == 126
    assert "cannot execute" in result.stderr


# --- finding the hook -------------------------------------------------------------------


@pytest.fixture
def installation(tmp_path, cuslice_bin):
    """A copy of the binary at <tmp>/bin/cuslice, so lib/ and hook/ beside it can be arranged."""
    (tmp_path / "bin").mkdir()
    binary = tmp_path / "bin" / "cuslice"
    shutil.copy2(cuslice_bin, binary)
    return tmp_path, binary


def install_hook(hook, directory):
    directory.mkdir(parents=True, exist_ok=True)
    shutil.copy2(hook, directory / "libcuslice.so")
    return directory / "libcuslice.so"


def preload_of(run_cuslice, binary, env=None, extra=()):
    return child_env(run_cuslice("run", *extra, "--", "env", binary=binary, env=env))["LD_PRELOAD"]


def test_finds_the_build_tree_hook_beside_the_binary(run_cuslice, installation, hook):
    root, binary = installation
    built = install_hook(hook, root / "hook")
    assert preload_of(run_cuslice, binary) == str(built)


def test_prefers_the_installed_layout_to_the_build_tree(run_cuslice, installation, hook):
    root, binary = installation
    install_hook(hook, root / "hook")
    installed = install_hook(hook, root / "lib")
    assert preload_of(run_cuslice, binary) == str(installed)


def test_the_environment_then_the_flag_take_precedence(run_cuslice, installation, hook, tmp_path):
    root, binary = installation
    install_hook(hook, root / "lib")
    from_env = install_hook(hook, tmp_path / "env")
    from_flag = install_hook(hook, tmp_path / "flag")
    env = {"CUSLICE_HOOK_PATH": str(from_env)}
    assert preload_of(run_cuslice, binary, env=env) == str(from_env)
    assert preload_of(run_cuslice, binary, env=env, extra=("--hook", from_flag)) == str(from_flag)


def test_no_hook_anywhere_fails_with_where_it_looked(run_cuslice, installation):
    root, binary = installation
    result = run_cuslice("run", "--", "true", binary=binary)
    assert result.returncode == 1
    assert "cannot find libcuslice.so" in result.stderr
    assert str(root / "lib" / "libcuslice.so") in result.stderr
    assert "CUSLICE_HOOK_PATH" in result.stderr


def test_a_named_hook_that_is_missing_fails(run_cuslice, installation, hook, tmp_path):
    root, binary = installation
    install_hook(hook, root / "lib")  # present, but the user asked for another
    result = run_cuslice(
        "run", "--", "true", binary=binary, env={"CUSLICE_HOOK_PATH": str(tmp_path / "gone.so")}
    )
    assert result.returncode == 1
    assert "gone.so" in result.stderr and "CUSLICE_HOOK_PATH" in result.stderr


def test_a_relative_hook_path_is_made_absolute(run_cuslice, hook, tmp_path):
    install_hook(hook, tmp_path / "rel")
    env = child_env(run_cuslice("run", "--hook", "rel/libcuslice.so", "--", "env", cwd=tmp_path))
    assert env["LD_PRELOAD"] == str(tmp_path / "rel" / "libcuslice.so")


# --- version ----------------------------------------------------------------------------


def test_version_and_dash_dash_version_agree(run_cuslice):
    version = run_cuslice("version")
    assert version.returncode == 0
    assert version.stdout.startswith("cuslice ")
    assert run_cuslice("--version").stdout == version.stdout
