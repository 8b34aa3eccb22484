"""deploy/container/cuslice-entrypoint.sh: appends the hook to LD_PRELOAD, once, then exec's."""
import shutil
import subprocess

import pytest

SHELLS = [s for s in ("dash", "busybox", "bash") if shutil.which(s)]


@pytest.fixture(scope="module")
def wrapper(deploy_dir):
    return deploy_dir / "container" / "cuslice-entrypoint.sh"


@pytest.fixture(params=SHELLS or ["sh"])
def run_wrapper(request, wrapper):
    """Runs the wrapper under one POSIX shell, with only PATH and `env` in the environment."""
    shell = [request.param] + (["sh"] if request.param == "busybox" else [])
    if request.param == "bash":
        shell.append("--posix")

    def run(*args, env=None):
        full_env = {"PATH": "/usr/bin:/bin"}
        full_env.update(env or {})
        return subprocess.run(
            [*shell, str(wrapper), *map(str, args)],
            env=full_env, capture_output=True, text=True, timeout=30,
        )

    return run


def preload_seen(result):
    assert result.returncode == 0, result.stderr
    return result.stdout.rstrip("\n")


PRINT_PRELOAD = ["sh", "-c", 'printf "%s\\n" "$LD_PRELOAD"']


def test_the_hook_becomes_ld_preload(run_wrapper, hook):
    result = run_wrapper(*PRINT_PRELOAD, env={"CUSLICE_HOOK_PATH": str(hook)})
    assert preload_seen(result) == str(hook)


def test_the_hook_is_appended_to_what_the_image_preloads(run_wrapper, hook, other_preload):
    for existing, expected in (
        (str(other_preload), f"{other_preload}:{hook}"),
        (f"{other_preload} ", f"{other_preload} {hook}"),
    ):
        env = {"CUSLICE_HOOK_PATH": str(hook), "LD_PRELOAD": existing}
        assert preload_seen(run_wrapper(*PRINT_PRELOAD, env=env)) == expected


def test_wrapping_twice_adds_the_hook_once(run_wrapper, wrapper, hook, other_preload):
    env = {"CUSLICE_HOOK_PATH": str(hook), "LD_PRELOAD": str(other_preload)}
    result = run_wrapper("sh", wrapper, *PRINT_PRELOAD, env=env)
    assert preload_seen(result) == f"{other_preload}:{hook}"


def test_a_hook_already_preloaded_from_elsewhere_counts(run_wrapper, hook, other_preload, tmp_path):
    elsewhere = tmp_path / "elsewhere" / "libcuslice.so"
    elsewhere.parent.mkdir()
    shutil.copy(hook, elsewhere)
    existing = f"{elsewhere} {other_preload}"
    env = {"CUSLICE_HOOK_PATH": str(hook), "LD_PRELOAD": existing}
    assert preload_seen(run_wrapper(*PRINT_PRELOAD, env=env)) == existing


def test_the_hook_is_loaded_into_the_command(run_wrapper, hook):
    result = run_wrapper("cat", "/proc/self/maps", env={"CUSLICE_HOOK_PATH": str(hook)})
    assert result.returncode == 0 and str(hook) in result.stdout
    assert result.stderr == ""


def test_arguments_and_exit_status_pass_through(run_wrapper, hook):
    env = {"CUSLICE_HOOK_PATH": str(hook)}
    result = run_wrapper("sh", "-c", 'printf "%s|" "$@"; exit 7', "argv0", "a b", "", "*", env=env)
    assert result.returncode == 7
    assert result.stdout == "a b||*|"


def test_a_missing_hook_refuses_to_run_the_command(run_wrapper, tmp_path):
    marker = tmp_path / "ran"
    missing = tmp_path / "libcuslice.so"
    result = run_wrapper("touch", marker, env={"CUSLICE_HOOK_PATH": str(missing)})
    assert result.returncode == 1
    assert str(missing) in result.stderr and "CUSLICE_HOOK_PATH" in result.stderr
    assert not marker.exists()


def test_a_hook_path_ld_so_would_split_is_refused(run_wrapper, hook, tmp_path):
    spaced = tmp_path / "my libs" / "libcuslice.so"
    spaced.parent.mkdir()
    shutil.copy(hook, spaced)
    result = run_wrapper("true", env={"CUSLICE_HOOK_PATH": str(spaced)})
    assert result.returncode == 1 and "space or colon" in result.stderr


def test_no_command_is_a_usage_error(run_wrapper, hook):
    result = run_wrapper(env={"CUSLICE_HOOK_PATH": str(hook)})
    assert result.returncode == 2 and "usage" in result.stderr


def test_a_missing_command_exits_127(run_wrapper, hook):
    result = run_wrapper("cuslice-test-no-such-command", env={"CUSLICE_HOOK_PATH": str(hook)})
    assert result.returncode == 127


def test_shellcheck_finds_nothing(wrapper):
    if not shutil.which("shellcheck"):
        pytest.skip("shellcheck is not installed")
    result = subprocess.run(["shellcheck", "-s", "sh", str(wrapper)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout
