"""The commands, files, settings and links that README.md and docs/**/*.md show are real.

Conventions for the documents (what this test reads):

- A fenced block with the info string `sh` (or `bash`, `shell`) holds commands a user types;
  `console` holds commands after a `$ ` prompt, and their output. Every such command is
  checked without being run: `cuslice` and `cuslice-scheduler` must accept its subcommand and
  every flag shown (`--help` lists them); a script (`bash bench/run.sh`, `python3 x.py`) must
  exist in the repository and mention every flag shown; every path into the repository or
  into an installation (`/usr/bin/cuslice`, `/opt/cuslice/lib/libcuslice.so`, ...) must
  exist in the tree `cmake --install` makes; a package's file name must be the one cpack
  makes for this version; a `CUSLICE_*` variable must be one the programs read; `systemctl`
  and `journalctl` must name the unit deploy/ ships; `kubectl -f` must name a file.
- `<!-- docs-test: run -->` on the line before such a block: the block also runs, as a bash
  script, on this machine, against the fake driver (tests/fake_driver), with the build's
  `cuslice` and `cuslice-scheduler` first on PATH, in an empty folder whose
  `python NAME.py` programs are stand-ins (each loads libcuda.so.1, allocates 1 GiB, waits
  2 s), with `CUSLICE_SOCKET` and `XDG_RUNTIME_DIR` in that folder. It must exit 0, and
  every stand-in it names must have run to its end. Only blocks that need no GPU, root,
  systemd or network can be marked so.
- `<!-- docs-test: skip -->` on the line before a block: not checked (say why next to it).
- A `yaml` block whose top level has `tenants:` or `scheduler:` is a scheduler
  configuration: `cuslice config check` must accept it.
- Every relative link (`[text](file.md#anchor)`) must lead to a file of the repository and,
  with an anchor, to a heading of that file.
- Every path into the repository that a document names anywhere (`hook/link/client.h`,
  `docs/design/`, `hook/base/symbols.{h,cpp}`), in prose or in a block, must exist.
- The versions a document shows as what the programs print (`shared segment ABI 2.4`,
  `socket protocol: registration 2, control 2`, the status JSON's `"abi": "2.4"`) must be
  the constants of protocol/shm_protocol.h and protocol/socket_protocol.h.
- README.md has at most 900 words, counted as `wc -w` counts them.
- configuration.md must document every key config/config_parser.cpp accepts and every
  `CUSLICE_*` variable the programs read; README.md's commands to build and test from source
  must be exactly what CI runs (.ci/run).
"""
import os
import re
import shlex
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest


def _env(name):
    value = os.environ.get(name)
    if not value:
        pytest.fail(f"{name} is not set: run these tests through ctest, which sets it")
    return value


SOURCE = Path(os.environ.get("CUSLICE_SOURCE_DIR", Path(__file__).resolve().parents[2]))
SHELL_INFO = {"sh", "bash", "shell", "console"}
DIRECTIVE = re.compile(r"^<!--\s*docs-test:\s*(run|skip)\s*-->$")
# Where an installation's files are: the .deb's /usr, the tarball in /opt/cuslice, a source
# install in /usr/local.
INSTALL_PREFIXES = ("/opt/cuslice/", "/usr/local/", "/usr/")
REPO_DIRS = ("bench/", "cli/", "cmake/", "config/", "deploy/", "docs/", "hook/", "protocol/",
             "scheduler/", "scripts/", "tests/")


# ---------------------------------------------------------------------------------------------
# Reading the documents


def documents():
    return [SOURCE / "README.md"] + sorted((SOURCE / "docs").rglob("*.md"))


class Block:
    def __init__(self, path, line, info, directive, text):
        self.path, self.line, self.info, self.directive, self.text = path, line, info, directive, text

    @property
    def id(self):
        return f"{self.path.relative_to(SOURCE)}:{self.line}"


def blocks(path):
    """The fenced blocks of a Markdown file, with the directive on the line before each."""
    found = []
    lines = path.read_text().splitlines()
    i = 0
    while i < len(lines):
        m = re.match(r"^(\s*)(```+|~~~+)\s*([\w+-]*)", lines[i])
        if not m:
            i += 1
            continue
        indent, fence, info = m.group(1), m.group(2), m.group(3).lower()
        previous = next((lines[k].strip() for k in range(i - 1, -1, -1) if lines[k].strip()), "")
        d = DIRECTIVE.match(previous)
        body = []
        j = i + 1
        while j < len(lines) and not lines[j].strip().startswith(fence):
            body.append(lines[j][len(indent):] if lines[j].startswith(indent) else lines[j])
            j += 1
        found.append(Block(path, i + 1, info, d.group(1) if d else None, "\n".join(body)))
        i = j + 1
    return found


def all_blocks(kind):
    out = []
    for doc in documents():
        for b in blocks(doc):
            if b.directive == "skip":
                continue
            if kind == "shell" and b.info in SHELL_INFO:
                out.append(b)
            elif kind == "run" and b.info in SHELL_INFO and b.directive == "run":
                out.append(b)
            elif kind == "yaml" and b.info in ("yaml", "yml") and re.search(r"^(tenants|scheduler):", b.text, re.M):
                out.append(b)
    return out


def commands(block):
    """Simple commands of a shell block: lists of words, operators and comments removed."""
    text = block.text
    if block.info == "console":
        text = "\n".join(line[2:] for line in text.splitlines() if line.startswith("$ "))
    text = text.replace("\\\n", " ")
    out = []
    for line in text.splitlines():
        lexer = shlex.shlex(line, posix=True, punctuation_chars=";&|")
        lexer.whitespace_split = True
        lexer.commenters = "#"
        current = []
        try:
            for token in lexer:
                if token and set(token) <= set(";&|"):
                    if current:
                        out.append(current)
                    current = []
                else:
                    current.append(token)
        except ValueError as e:
            pytest.fail(f"{block.id}: cannot parse `{line}`: {e}")
        if current:
            out.append(current)
    return out


def strip_prefixes(words):
    """Drops VAR=value assignments, sudo, env, timeout N, exec; returns (assignments, words)."""
    assignments = []
    while words:
        w = words[0]
        if re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", w):
            assignments.append(w)
            words = words[1:]
        elif w in ("sudo", "exec", "env", "command", "time"):
            words = words[1:]
        elif w == "timeout" and len(words) > 1:
            words = words[2:]
        else:
            break
    return assignments, words


# ---------------------------------------------------------------------------------------------
# What the checks compare with


@pytest.fixture(scope="session")
def cli():
    return Path(_env("CUSLICE_BIN"))


@pytest.fixture(scope="session")
def scheduler():
    return Path(_env("CUSLICE_SCHEDULER_BIN"))


@pytest.fixture(scope="session")
def install_tree(tmp_path_factory):
    """What `cmake --install` puts under a prefix."""
    root = tmp_path_factory.mktemp("install")
    subprocess.run(["cmake", "--install", _env("CUSLICE_BUILD_DIR"), "--prefix", root],
                   check=True, capture_output=True, text=True, timeout=120)
    return root


@pytest.fixture(scope="session")
def package_names():
    """The file names cpack gives the .deb and the tarball of this version."""
    config = (Path(_env("CUSLICE_BUILD_DIR")) / "CPackConfig.cmake").read_text()

    def value(name):
        m = re.search(rf'^set\({name} "([^"]*)"\)', config, re.M)
        assert m, f"{name} not in CPackConfig.cmake"
        return m.group(1)

    arch = subprocess.run(["dpkg", "--print-architecture"], capture_output=True, text=True,
                          check=True).stdout.strip()
    return {f"{value('CPACK_PACKAGE_FILE_NAME')}.tar.gz",
            f"{value('CPACK_PACKAGE_NAME')}_{value('CPACK_PACKAGE_VERSION')}_{arch}.deb"}


def source_text(*folders, suffixes=(".cpp", ".h")):
    return "\n".join(p.read_text(errors="replace") for f in folders for p in (SOURCE / f).rglob("*")
                     if p.suffix in suffixes)


@pytest.fixture(scope="session")
def known_variables():
    """The CUSLICE_* variables the hook, the scheduler and the tool read."""
    return set(re.findall(r'"(CUSLICE_[A-Z_]+)"', source_text("hook", "cli", "scheduler", "protocol", "config")))


_help_cache = {}


def help_text(args):
    key = tuple(map(str, args))
    if key not in _help_cache:
        r = subprocess.run([*key, "--help"], capture_output=True, text=True, timeout=30,
                           env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")})
        _help_cache[key] = (r.returncode, r.stdout + r.stderr)
    return _help_cache[key]


def flags_in(text):
    return set(re.findall(r"(?<![\w-])(--?[A-Za-z][\w-]*)", text))


def shown_flags(words):
    """Flags a command line shows, up to `--`; `[--flag]` and `--flag=value` count as `--flag`,
    and a short flag's attached number or substitution (`-j2`, `-j$(nproc)`) as `-j`."""
    flags = []
    for w in words:
        if w == "--":
            break
        w = w.strip("[]")
        if re.match(r"^--?[A-Za-z]", w):
            flags.append(re.sub(r"^(-[A-Za-z])(\d+|\$\(.*\)|\$\{.*\})$", r"\1", w.split("=", 1)[0]))
    return flags


def subcommands(help_output):
    section = re.search(r"^Subcommands:\n((?:  .*\n?)*)", help_output, re.M)
    return {line.split()[0] for line in section.group(1).splitlines() if line.strip()} if section else set()


# ---------------------------------------------------------------------------------------------
# The checks of one command


def check_tool(binary, name, words, problems):
    """`cuslice [SUB ...] flags`: the subcommands exist and each flag is in the help."""
    path = [binary]
    rest = words[1:]
    while rest and not rest[0].startswith("-"):
        rc, out = help_text(path)
        if rest[0].strip("[]") not in subcommands(out):
            break
        path.append(rest[0])
        rest = rest[1:]
    rc, out = help_text(path)
    shown = " ".join([name] + [str(p) for p in path[1:]])
    if rc != 0:
        problems.append(f"`{shown} --help` failed")
        return
    if len(path) == 1 and name == "cuslice" and rest and not rest[0].startswith("-"):
        problems.append(f"`cuslice {rest[0]}`: no such subcommand")
    for flag in shown_flags(rest):
        if flag not in flags_in(out):
            problems.append(f"`{shown}` has no flag {flag}")


def check_script(words, problems):
    """`bash SCRIPT flags` or `python3 SCRIPT flags`: the script exists and knows each flag."""
    script = next((w for w in words[1:] if not w.startswith("-")), None)
    if script is None or "$" in script:
        return
    path = SOURCE / script
    if not path.is_file():
        if any(script.startswith(d) for d in REPO_DIRS) or script.endswith(".sh"):
            problems.append(f"no script {script} in the repository")
        return  # a user's own program (python train.py)
    # A flag may be handled by a helper beside the script (run_compute.sh -> compute/harness.py).
    text = "\n".join(p.read_text(errors="replace") for p in path.parent.rglob("*")
                     if p.is_file() and p.suffix in (".sh", ".py", ".cu", ".c", ".cpp"))
    text += (SOURCE / "scripts/cuslice-tree.sh").read_text()
    args = words[words.index(script) + 1:]
    for flag in shown_flags(args):
        if flag not in text:
            problems.append(f"{script} does not know {flag}")


def check_path(token, install_tree, problems):
    """A path into the repository or an installation must exist."""
    if "$" in token or "*" in token or "<" in token:
        return
    token = token.rstrip(",.;:")
    if any(token.startswith(d) for d in REPO_DIRS):
        if not (SOURCE / token).exists():
            problems.append(f"no {token} in the repository")
    elif token.startswith("build/") and not token.startswith("build/packages"):
        if not (Path(_env("CUSLICE_BUILD_DIR")) / token[len("build/"):]).exists():
            problems.append(f"no {token} in the build")
    elif "cuslice" in token and token.startswith(INSTALL_PREFIXES):
        prefix = next(p for p in INSTALL_PREFIXES if token.startswith(p))
        relative = token[len(prefix):]
        if relative and not (install_tree / relative).exists():
            problems.append(f"{token}: no {relative} in an installation")


def check_command(words, install_tree, package_names, known_variables, cli, scheduler, problems):
    assignments, words = strip_prefixes(words)
    for a in assignments:
        name, value = a.split("=", 1)
        if name.startswith("CUSLICE_") and name not in known_variables:
            problems.append(f"{name}: no program reads this variable")
        for part in value.split(":"):
            check_path(part, install_tree, problems)
    if not words:
        return
    name = os.path.basename(words[0])
    if name == "export":
        for w in words[1:]:
            var = w.split("=", 1)[0]
            if var.startswith("CUSLICE_") and var not in known_variables:
                problems.append(f"{var}: no program reads this variable")
        return
    for w in words:
        for var in re.findall(r"\bCUSLICE_[A-Z_]+", w):
            if var not in known_variables:
                problems.append(f"{var}: no program reads this variable")
        if re.match(r"^\S*cuslice[-_][0-9]", os.path.basename(w)) and re.search(r"\.(deb|tar\.gz)$", w):
            if os.path.basename(w) not in package_names:
                problems.append(f"{w}: cpack makes {sorted(package_names)}")
        check_path(w, install_tree, problems)
    if name == "cuslice":
        check_tool(cli, "cuslice", words, problems)
    elif name == "cuslice-scheduler":
        check_tool(scheduler, "cuslice-scheduler", words, problems)
    elif name in ("bash", "sh", "python", "python3"):
        check_script(words, problems)
    elif name in ("systemctl", "journalctl"):
        units = {p.stem for p in (SOURCE / "deploy/systemd").glob("*.service")}
        for w in words[1:]:
            if w.startswith("cuslice") and "/" not in w and w.removesuffix(".service") not in units:
                problems.append(f"{name}: no unit {w} in deploy/systemd")
    elif name in ("ctest", "cmake", "cpack"):
        rc, out = help_text([name])
        for flag in shown_flags(words[1:]):
            if flag not in flags_in(out):
                problems.append(f"{name} has no flag {flag}")


# ---------------------------------------------------------------------------------------------
# The tests


@pytest.mark.parametrize("block", all_blocks("shell"), ids=lambda b: b.id)
def test_shown_commands_refer_to_what_exists(block, install_tree, package_names, known_variables, cli,
                                             scheduler):
    problems = []
    for words in commands(block):
        check_command(words, install_tree, package_names, known_variables, cli, scheduler, problems)
    assert not problems, f"{block.id}:\n" + "\n".join(problems)


STAND_IN = textwrap.dedent('''\
    """Stand-in for a CUDA program of the docs: allocates 1 GiB, waits, says it finished."""
    import ctypes, os, sys, time
    name = os.path.basename(sys.argv[0])
    cuda = ctypes.CDLL("libcuda.so.1")
    def check(rc, what):
        if rc != 0:
            sys.exit(f"{name}: {what}: CUDA error {rc}")
    check(cuda.cuInit(0), "cuInit")
    dev = ctypes.c_int()
    check(cuda.cuDeviceGet(ctypes.byref(dev), 0), "cuDeviceGet")
    ctx = ctypes.c_void_p()
    check(cuda.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev), "cuDevicePrimaryCtxRetain")
    check(cuda.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")
    free, total = ctypes.c_size_t(), ctypes.c_size_t()
    check(cuda.cuMemGetInfo_v2(ctypes.byref(free), ctypes.byref(total)), "cuMemGetInfo")
    ptr = ctypes.c_uint64()
    check(cuda.cuMemAlloc_v2(ctypes.byref(ptr), ctypes.c_size_t(1 << 30)), "cuMemAlloc")
    time.sleep(2)
    with open(name + ".finished", "w") as f:
        f.write(f"total {total.value}\\n")
''')


def _stop_scheduler(env):
    """Stops a scheduler the block left behind (it exits by itself once idle)."""
    r = subprocess.run(["cuslice", "status", "--json"], env=env, capture_output=True, text=True, timeout=30)
    m = re.search(r'"pid":\s*(\d+)', r.stdout)
    if r.returncode == 0 and m and '"reachable":true' in r.stdout.replace(" ", ""):
        try:
            os.kill(int(m.group(1)), signal.SIGTERM)
        except ProcessLookupError:
            pass


@pytest.mark.parametrize("block", all_blocks("run"), ids=lambda b: b.id)
def test_runnable_blocks_run_on_the_fake_driver(block, cli, scheduler, tmp_path):
    assert "sudo" not in block.text, f"{block.id}: a block marked run may not need root"
    work = tmp_path / "work"
    bin_dir = tmp_path / "bin"
    run_dir = tmp_path / "run"
    for d in (work, bin_dir, run_dir):
        d.mkdir()
    # The build's programs; they find the hook and each other from their real location.
    (bin_dir / "cuslice").symlink_to(cli)
    (bin_dir / "cuslice-scheduler").symlink_to(scheduler)
    (bin_dir / "python").symlink_to(sys.executable)
    programs = sorted(set(re.findall(r"\bpython3?\s+([\w.-]+\.py)\b", block.text)))
    for program in programs:
        (work / program).write_text(STAND_IN)
    env = {
        "PATH": f"{bin_dir}:/usr/bin:/bin",
        "HOME": str(tmp_path),
        "XDG_RUNTIME_DIR": str(run_dir),
        "CUSLICE_SOCKET": str(run_dir / "cuslice.sock"),
        "LD_LIBRARY_PATH": _env("FAKE_DRIVER_DIR"),
    }
    # Under a sanitizer (CUSLICE_TEST_PRELOAD names its runtime) the block's programs, a shell
    # and Python among them, take the instrumented hook from `cuslice run`: the runtime comes
    # first in every one, and the sanitizer's options reach them.
    if os.environ.get("CUSLICE_TEST_PRELOAD"):
        env["LD_PRELOAD"] = os.environ["CUSLICE_TEST_PRELOAD"]
        env.update({k: v for k, v in os.environ.items() if k in ("ASAN_OPTIONS", "LSAN_OPTIONS", "UBSAN_OPTIONS")})
    try:
        result = subprocess.run(["bash", "-e", "-o", "pipefail", "-c", block.text], cwd=work, env=env,
                                capture_output=True, text=True, timeout=90)
    finally:
        _stop_scheduler(env)
    output = f"{block.id}:\n--- stdout\n{result.stdout}\n--- stderr\n{result.stderr}"
    assert result.returncode == 0, output
    for program in programs:
        assert (work / f"{program}.finished").exists(), f"{program} did not finish\n{output}"


@pytest.mark.parametrize("block", all_blocks("yaml"), ids=lambda b: b.id)
def test_configurations_shown_are_valid(block, cli, tmp_path):
    path = tmp_path / "cuslice.yaml"
    path.write_text(block.text + "\n")
    r = subprocess.run([cli, "config", "check", path], capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, f"{block.id}: {r.stderr}"


def slug(heading):
    """GitHub's anchor of a heading."""
    text = re.sub(r"[`*_]", "", heading.strip().lower())
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path):
    text = re.sub(r"```.*?```", "", path.read_text(), flags=re.S)
    return {slug(m) for m in re.findall(r"^#+\s+(.*)$", text, re.M)}


@pytest.mark.parametrize("doc", documents(), ids=lambda p: str(p.relative_to(SOURCE)))
def test_links_lead_to_files_and_headings(doc):
    text = re.sub(r"```.*?```", "", doc.read_text(), flags=re.S)
    problems = []
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"^[a-z]+:", target):
            continue  # http:, https:, mailto:
        file, _, anchor = target.partition("#")
        path = (doc.parent / file).resolve() if file else doc
        if not path.exists():
            problems.append(f"{target}: no such file")
        elif anchor and path.suffix == ".md" and anchor not in anchors(path):
            problems.append(f"{target}: no such heading in {path.name}")
    assert not problems, f"{doc.name}:\n" + "\n".join(problems)


def test_configuration_md_documents_every_key_and_variable(known_variables):
    doc = (SOURCE / "docs/reference/configuration.md").read_text()
    parser = (SOURCE / "config/config_parser.cpp").read_text()
    keys = set()
    for group in re.findall(r"check_keys\(\w+, \{([^}]*)\}\)", parser):
        keys |= set(re.findall(r'"(\w+)"', group))
    assert keys >= {"tenants", "quantum", "name", "share", "uid"}, keys
    # A key is documented by a table row (`key`, `compute.key`) or a heading (`scheduler`).
    documented = set(re.findall(r"^\| `(?:\w+\.)?(\w+)`", doc, re.M))
    documented |= set(re.findall(r"^#+ `(\w+)", doc, re.M))
    missing = sorted(k for k in keys if k not in documented)
    assert not missing, f"keys of config/config_parser.cpp not in configuration.md: {missing}"
    undocumented = sorted(v for v in known_variables if v not in doc)
    assert not undocumented, f"variables the programs read, not in configuration.md: {undocumented}"


def test_readme_builds_and_tests_as_ci_does():
    ci = [line.strip() for line in (SOURCE / ".ci/run").read_text().splitlines()
          if line.strip() and not line.startswith("#") and not line.startswith(("set ", "cd "))]
    readme_blocks = [b for b in blocks(SOURCE / "README.md") if b.info in SHELL_INFO]
    shown = [[line.strip() for line in b.text.splitlines() if line.strip()] for b in readme_blocks]
    assert ci in shown, f"README.md has no block of exactly .ci/run's commands {ci}"


# Top-level folders of the repository a document may name a path in.
PATH_IN_REPO = re.compile(r"(?<![\w./~-])((?:\.ci|bench|cli|cmake|common|config|deploy|device_plugin|docs|"
                          r"dra_plugin|hook|node|protocol|scheduler|scripts|tests)/[\w./{},*<>$-]*)")


def named_paths(text):
    """The repository paths a text names, `a/b.{h,cpp}` as `a/b.h` and `a/b.cpp`."""
    out = set()
    for token in PATH_IN_REPO.findall(text):
        token = token.rstrip(".,;:")
        if any(c in token for c in "*<>$"):
            continue  # a pattern or a placeholder, not one path
        out |= expand(token)
    return out


# A source file named without its folder (`quota.cpp`, `symbols.{h,cpp}`) must still be one.
SOURCE_FILE = re.compile(r"(?<![\w./-])([\w-]+\.(?:\{[\w,]+\}|h|cpp|c|cu|S|def|map))(?![\w.])")


@pytest.fixture(scope="session")
def source_file_names():
    r = subprocess.run(["git", "-C", SOURCE, "ls-files"], capture_output=True, text=True)
    files = r.stdout.split() if r.returncode == 0 else [str(p) for p in SOURCE.rglob("*") if p.is_file()]
    return {os.path.basename(f) for f in files}


def expand(token):
    m = re.match(r"^(.*)\{([^{}]*)\}(.*)$", token)
    return {m.group(1) + alt + m.group(3) for alt in m.group(2).split(",")} if m else {token}


@pytest.mark.parametrize("doc", documents(), ids=lambda p: str(p.relative_to(SOURCE)))
def test_paths_named_exist(doc, source_file_names):
    text = doc.read_text()
    missing = sorted(p for p in named_paths(text) if not (SOURCE / p).exists())
    missing += sorted({n for token in SOURCE_FILE.findall(text) for n in expand(token)} - source_file_names)
    assert not missing, f"{doc.relative_to(SOURCE)} names paths the repository does not have: {missing}"


def _constant(header, name):
    m = re.search(rf"\b{name}\s*=\s*(\d+)\s*;", (SOURCE / header).read_text())
    assert m, f"no {name} in {header}"
    return int(m.group(1))


def test_versions_shown_are_the_protocol_constants():
    abi = f"{_constant('protocol/shm_protocol.h', 'kAbiMajor')}.{_constant('protocol/shm_protocol.h', 'kAbiMinor')}"
    registration = _constant("protocol/socket_protocol.h", "kVersion")
    control = _constant("protocol/socket_protocol.h", "kControlVersion")
    shown = {"abi": [], "protocols": []}
    problems = []
    for doc in documents():
        text = doc.read_text()
        where = doc.relative_to(SOURCE)
        for found in re.findall(r"shared segment ABI (\d+\.\d+)", text) + re.findall(r'"abi": "(\d+\.\d+)"', text):
            shown["abi"].append(where)
            if found != abi:
                problems.append(f"{where}: ABI {found}, protocol/shm_protocol.h has {abi}")
        for r, c in re.findall(r"socket protocol: registration (\d+), control (\d+)", text):
            shown["protocols"].append(where)
            if (int(r), int(c)) != (registration, control):
                problems.append(f"{where}: registration {r}, control {c}; protocol/socket_protocol.h has "
                                f"{registration} and {control}")
    assert shown["abi"] and shown["protocols"], f"no document shows the versions any more: {shown}"
    assert not problems, "\n".join(problems)


def test_readme_is_short():
    words = len((SOURCE / "README.md").read_text().split())  # what `wc -w` counts
    assert words <= 900, f"README.md has {words} words, at most 900: move the rest into docs/"
