"""`cuslice config check FILE`: the daemon's parser, errors at their exact place, exit 3."""


def write(tmp_path, text, name="cuslice.yaml"):
    path = tmp_path / name
    path.write_text(text)
    return path


def test_a_valid_file_prints_one_summary_line_and_exits_0(run_cuslice, tmp_path):
    path = write(tmp_path, """\
scheduler: {quantum: 10ms, default_tenant: batch, metrics_port: 9400}
tenants:
  - {name: train, compute: {share: 60%}}
  - {name: batch, priority: low}
""")
    result = run_cuslice("config", "check", path)
    assert result.returncode == 0, result.stderr
    assert result.stdout == (
        f"{path}: valid: 2 tenants (train, batch), quantum 10ms, default tenant batch, "
        "metrics on port 9400\n"
    )
    assert result.stderr == ""


def test_every_error_is_reported_at_its_line_and_column_and_exits_3(run_cuslice, tmp_path):
    path = write(tmp_path, """\
scheduler:
  quantum: 0ms
  metrics_port: 70000
tenants:
  - name: a
    compute: {share: 70%}
  - name: b
    priority: urgent
    compute: {share: 40%}
    colour: blue
""")
    result = run_cuslice("config", "check", path)
    assert result.returncode == 3
    assert result.stdout == ""
    assert result.stderr.splitlines() == [
        f"{path}:2:12: `quantum` must be above zero",
        f"{path}:3:17: bad `metrics_port` `70000`: expected a TCP port from 1 to 65535",
        f"{path}:8:15: bad priority `urgent`: expected high, normal or low",
        f"{path}:9:22: the tenants' shares add up to 110%, more than 100%",
        f"{path}:10:5: unknown key `colour` (expected one of: name, priority, memory, compute, match, allow_env, on_violation, preemptible, gpus, host_pool, spatial)",
    ]


def test_a_yaml_syntax_error_is_positioned_too(run_cuslice, tmp_path):
    path = write(tmp_path, "tenants:\n  - {name: a\n")
    result = run_cuslice("config", "check", path)
    assert result.returncode == 3
    assert result.stderr.startswith(f"{path}:")
    assert "YAML syntax error" in result.stderr


def test_an_unreadable_file_is_invalid(run_cuslice, tmp_path):
    missing = tmp_path / "absent.yaml"
    result = run_cuslice("config", "check", missing)
    assert result.returncode == 3
    assert result.stderr == f"{missing}: cannot read the file: No such file or directory\n"


def test_no_file_is_a_usage_error(run_cuslice):
    result = run_cuslice("config", "check")
    assert result.returncode == 2
    assert "FILE" in result.stderr
