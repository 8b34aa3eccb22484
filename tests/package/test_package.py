"""The .deb and the tarball that `cpack` builds (cmake/Packaging.cmake).

The .deb must hold the programs, the hook, the systemd unit (pointing at /usr/bin), the
deploy files and the docs, and depend on Debian's packages of the libraries the programs
link. The tarball must run wherever it is unpacked on a machine that has none of those
packages: every library its programs and libraries load is inside it, or in the system's own
set (glibc, libstdc++, libgcc_s, libsystemd and what libsystemd loads), found through RUNPATH
with an empty environment.

With CUSLICE_TARBALL, the tarball checked is that one, built elsewhere (the release tarball:
scripts/release-tarball.sh runs these tests in the Debian 11 root it is built in), and the .deb's
tests are skipped; CUSLICE_TARBALL_GLIBC and CUSLICE_TARBALL_GLIBCXX then bound the versions of
glibc and of the system's libstdc++ that anything in it may need.
"""
import os
import re
import subprocess
import tarfile
from pathlib import Path

import pytest

VERSION_RE = r"[0-9]+\.[0-9]+\.[0-9]+"
# Sonames that may come from the system: glibc's libraries, the compiler's runtime, libsystemd.
SYSTEM_NAMES = re.compile(
    r"^(linux-vdso\.so|ld-linux|libc\.so|libm\.so|libmvec\.so|libpthread\.so|libdl\.so|librt\.so|"
    r"libresolv\.so|libutil\.so|libanl\.so|libnss_|libstdc\+\+\.so|libgcc_s\.so|libsystemd\.so)")
# Libraries the programs link that must be inside the tarball, not taken from the system.
MUST_BE_BUNDLED = ["libyaml-cpp.so", "libspdlog.so", "libfmt.so", "libmicrohttpd.so",
                   "libprometheus-cpp-core.so", "libgrpc++.so", "libprotobuf.so", "libcurl.so"]


def _env(name):
    value = os.environ.get(name)
    if not value:
        pytest.fail(f"{name} is not set: run these tests through ctest, which sets it")
    return value


@pytest.fixture(scope="module")
def packages(tmp_path_factory):
    given = os.environ.get("CUSLICE_TARBALL")
    if given:
        return {"deb": None, "tarball": Path(given), "dir": Path(given).parent}
    built = os.environ.get("CUSLICE_PACKAGES_DIR")  # cpack's output, made once for all tests
    if built:
        out = Path(built)
    else:
        out = tmp_path_factory.mktemp("packages")
        result = subprocess.run(
            [_env("CUSLICE_CPACK"), "-G", "DEB;TGZ", "--config",
             str(Path(_env("CUSLICE_BUILD_DIR")) / "CPackConfig.cmake"), "-B", str(out)],
            capture_output=True, text=True, timeout=150)
        assert result.returncode == 0, result.stdout + result.stderr
    debs = list(out.glob("cuslice_*.deb"))
    tarballs = list(out.glob("cuslice-*-linux-*.tar.gz"))
    assert len(debs) == 1 and len(tarballs) == 1, list(out.iterdir())
    return {"deb": debs[0], "tarball": tarballs[0], "dir": out}


@pytest.fixture(scope="module")
def unpacked(packages, tmp_path_factory):
    """The tarball unpacked in a folder of its own, as a user would."""
    dest = tmp_path_factory.mktemp("unpacked")
    with tarfile.open(packages["tarball"]) as tar:
        tar.extractall(dest)
    (top,) = dest.iterdir()
    return top


@pytest.fixture(scope="module")
def deb(packages):
    if packages["deb"] is None:
        pytest.skip("checking a tarball built elsewhere (CUSLICE_TARBALL): no .deb")
    return packages["deb"]


def _deb_files(deb):
    listing = subprocess.run(["dpkg-deb", "-c", deb], capture_output=True, text=True, check=True).stdout
    return {line.split()[-1] for line in listing.splitlines() if not line.startswith("d")}


def _docs():
    source = Path(_env("CUSLICE_SOURCE_DIR"))
    return ["README.md"] + sorted(p.name for p in (source / "docs").glob("*/*.md"))


def test_the_deb_holds_the_programs_hook_unit_deploy_files_and_docs(deb):
    expected = {
        "./usr/bin/cuslice", "./usr/bin/cuslice-scheduler", "./usr/bin/cuslice-device-plugin",
        "./usr/bin/cuslice-dra-plugin", "./usr/lib/libcuslice.so",
        "./usr/lib/systemd/system/cuslice-scheduler.service",
        "./usr/share/cuslice/cuslice-entrypoint.sh", "./usr/share/cuslice/cuslice.example.yaml",
    } | {f"./usr/share/doc/cuslice/{name}" for name in _docs()}
    assert _deb_files(deb) == expected


def test_the_deb_depends_on_the_libraries_the_programs_link(deb):
    fields = subprocess.run(["dpkg-deb", "-f", deb, "Package", "Version", "Depends"],
                            capture_output=True, text=True, check=True).stdout
    assert "Package: cuslice" in fields
    assert re.search(rf"^Version: {VERSION_RE}$", fields, re.M), fields
    depends = re.search(r"^Depends: (.*)$", fields, re.M).group(1)
    names = {d.split()[0] for d in depends.split(", ")}
    for prefix in ["libc6", "libstdc++6", "libyaml-cpp", "libspdlog", "libfmt", "libmicrohttpd",
                   "libprometheus-cpp-core", "libsystemd0", "libcurl4"]:
        assert any(n.startswith(prefix) for n in names), (prefix, depends)


def test_the_deb_unit_starts_the_installed_scheduler(deb, tmp_path):
    subprocess.run(["dpkg-deb", "-x", deb, tmp_path], check=True)
    unit = (tmp_path / "usr/lib/systemd/system/cuslice-scheduler.service").read_text()
    assert re.search(r"^ExecStart=/usr/bin/cuslice-scheduler ", unit, re.M), unit
    assert "Documentation=file:///usr/share/doc/cuslice/operations.md" in unit
    assert (tmp_path / "usr/share/doc/cuslice/operations.md").is_file()
    # The unpacked programs run (their libraries are this machine's Debian packages).
    version = subprocess.run([tmp_path / "usr/bin/cuslice", "version"], capture_output=True,
                             text=True, timeout=30)
    assert version.returncode == 0 and re.search(VERSION_RE, version.stdout), version


def test_the_deb_maintainer_scripts_are_executable_shell_scripts(deb, tmp_path):
    subprocess.run(["dpkg-deb", "-e", deb, tmp_path], check=True)
    for script in ["postinst", "prerm", "postrm"]:
        path = tmp_path / script
        assert os.access(path, os.X_OK), script
        result = subprocess.run(["sh", "-n", path], capture_output=True, text=True)
        assert result.returncode == 0, (script, result.stderr)


def test_the_tarball_has_the_installed_layout(unpacked):
    assert re.fullmatch(rf"cuslice-{VERSION_RE}-linux-[a-z0-9_]+", unpacked.name), unpacked.name
    for path in ["bin/cuslice", "bin/cuslice-scheduler", "bin/cuslice-device-plugin", "bin/cuslice-dra-plugin",
                 "lib/libcuslice.so",
                 "lib/systemd/system/cuslice-scheduler.service", "share/cuslice/cuslice-entrypoint.sh",
                 "share/cuslice/cuslice.example.yaml", "share/cuslice/bundled-libraries.txt"]:
        assert (unpacked / path).is_file(), path
    for name in _docs():
        assert (unpacked / "share/doc/cuslice" / name).is_file(), name
    for name in MUST_BE_BUNDLED:
        assert list((unpacked / "lib").glob(name + "*")), f"{name} is not in the tarball's lib/"
    unit = (unpacked / "lib/systemd/system/cuslice-scheduler.service").read_text()
    assert re.search(r"^ExecStart=/opt/cuslice/bin/cuslice-scheduler ", unit, re.M), unit


def test_the_tarball_programs_run_with_an_empty_environment(unpacked):
    for args, expect in [(["bin/cuslice", "version"], VERSION_RE),
                         (["bin/cuslice-scheduler", "--help"], "--config"),
                         (["bin/cuslice-device-plugin", "--help"], "--plugin-dir"),
                         (["bin/cuslice-dra-plugin", "--help"], "--registry-dir")]:
        result = subprocess.run(["env", "-i", unpacked / args[0], *args[1:]], capture_output=True,
                                text=True, timeout=30)
        assert result.returncode == 0, (args, result.stderr)
        assert re.search(expect, result.stdout), (args, result.stdout)


def test_the_tarball_cli_preloads_its_own_hook_and_starts_its_own_scheduler(unpacked, tmp_path):
    socket = tmp_path / "s.sock"
    result = subprocess.run(["env", "-i", unpacked / "bin/cuslice", "run", "--socket", socket,
                             "--", "/usr/bin/env"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert f"LD_PRELOAD={unpacked}/lib/libcuslice.so" in result.stdout.splitlines(), result.stdout
    log = Path(f"{socket}.log").read_text()
    assert "tenants from `cuslice run`" in log, log


def _elf_files(top):
    for path in sorted((top / "bin").iterdir()) + sorted((top / "lib").glob("*.so*")):
        with open(path, "rb") as f:
            if f.read(4) == b"\x7fELF":
                yield path


def _ldd(path):
    env = {k: v for k, v in os.environ.items() if k != "LD_LIBRARY_PATH"}
    out = subprocess.run(["ldd", path], capture_output=True, text=True, env=env, timeout=30)
    assert out.returncode == 0, (path, out.stderr)
    deps = {}
    for line in out.stdout.splitlines():
        parts = line.split()
        if "=>" in parts:
            deps[parts[0]] = parts[2]  # "not" when not found
    return deps


def _system_set(unpacked):
    """System sonames, and what the system's libsystemd loads (it comes with libsystemd)."""
    names = set()
    for path in _elf_files(unpacked):
        for name, where in _ldd(path).items():
            if name.startswith("libsystemd.so"):
                names |= set(_ldd(where))
    return names


def test_every_library_resolves_inside_the_tarball_or_in_the_system_set(unpacked):
    lib = (unpacked / "lib").resolve()
    from_libsystemd = _system_set(unpacked)
    for path in _elf_files(unpacked):
        for name, where in _ldd(path).items():
            assert where != "not", f"{path.name}: {name} not found"
            if SYSTEM_NAMES.match(name) or name in from_libsystemd:
                continue
            assert Path(where).resolve().parent == lib, f"{path.name} loads {name} from {where}"


def test_runpath_points_at_the_tarball_lib(unpacked):
    for path in _elf_files(unpacked):
        dynamic = subprocess.run(["readelf", "-d", path], capture_output=True, text=True, check=True).stdout
        runpath = re.search(r"\(RUNPATH\)\s+Library runpath: \[(.*)\]", dynamic)
        if path.parent.name == "bin":
            assert runpath and runpath.group(1) == "$ORIGIN/../lib", (path, dynamic)
        elif path.name != "libcuslice.so":  # the hook needs only libc
            assert runpath and runpath.group(1) == "$ORIGIN", (path, dynamic)


def _version(text):
    return tuple(int(p) for p in text.split("."))


def test_nothing_in_the_tarball_needs_a_newer_glibc_or_libstdcxx_than_it_says(unpacked):
    limits = {"GLIBC": os.environ.get("CUSLICE_TARBALL_GLIBC"),
              "GLIBCXX": os.environ.get("CUSLICE_TARBALL_GLIBCXX")}
    if not any(limits.values()):
        pytest.skip("no CUSLICE_TARBALL_GLIBC/GLIBCXX: this build's tarball is for systems like this one")
    too_new = []
    for path in _elf_files(unpacked):
        symbols = subprocess.run(["objdump", "-T", path], capture_output=True, text=True, check=True).stdout
        for line in symbols.splitlines():
            m = re.search(r"\((GLIBC|GLIBCXX)_([0-9.]+)\)\s+(\S+)$", line)
            if m and limits[m.group(1)] and _version(m.group(2)) > _version(limits[m.group(1)]):
                too_new.append(f"{path.name}: {m.group(3)} needs {m.group(1)}_{m.group(2)}")
    assert not too_new, f"newer than glibc {limits['GLIBC']} / GLIBCXX_{limits['GLIBCXX']}: " + "; ".join(too_new)
