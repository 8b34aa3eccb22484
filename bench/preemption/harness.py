"""What the preemption benchmarks (run.py, fast.py) share: worker processes that print JSON
events, nvidia-smi queries, a cuslice-scheduler started on a configuration of its own with its
tenants' environment, and `cuslice status --json` read per tenant.

Nothing here needs a GPU to import; the functions that ask nvidia-smi or start the scheduler
do."""
import json
import os
import re
import select
import shutil
import signal
import subprocess
import tempfile
import time

GB = 1e9
GiB = 1 << 30


class Proc:
    """A process whose stdout is JSON lines; stderr goes to a log file. With stdin=True the
    process reads lines that send() writes."""

    def __init__(self, argv, env, log_path, stdin=False):
        self.log_path = log_path
        self.log = open(log_path, "w")
        self.p = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=self.log,
                                  stdin=subprocess.PIPE if stdin else subprocess.DEVNULL)
        self.events = []
        self._pending = b""

    def send(self, line):
        self.p.stdin.write((line + "\n").encode())
        self.p.stdin.flush()

    def poll_events(self, timeout_s):
        """Reads what arrives within timeout_s (raw reads: no buffer hides a line from select);
        returns the new events."""
        new = []
        end = time.monotonic() + timeout_s
        fd = self.p.stdout.fileno()
        while True:
            left = max(0.0, end - time.monotonic())
            ready, _, _ = select.select([fd], [], [], left)
            if not ready:
                break
            chunk = os.read(fd, 65536)
            if not chunk:
                break
            self._pending += chunk
            *lines, self._pending = self._pending.split(b"\n")
            for line in lines:
                try:
                    event = json.loads(line)
                except json.JSONDecodeError:
                    continue
                self.events.append(event)
                new.append(event)
            if left == 0 or new:
                break
        return new

    def wait_event(self, predicate, timeout_s, what):
        end = time.monotonic() + timeout_s
        for e in self.events:
            if predicate(e):
                return e
        while time.monotonic() < end:
            for e in self.poll_events(min(1.0, max(0.0, end - time.monotonic()))):
                if predicate(e):
                    return e
            if self.p.poll() is not None and not select.select([self.p.stdout.fileno()], [], [], 0)[0]:
                raise RuntimeError(f"{what}: the process exited ({self.p.returncode}); see {self.log_path}")
        raise RuntimeError(f"{what}: nothing within {timeout_s} s; see {self.log_path}")

    def stop(self):
        if self.p.poll() is None:
            self.p.send_signal(signal.SIGTERM)
            try:
                self.p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait()
        self.log.close()


def smi(*query):
    return subprocess.run(["nvidia-smi", *query], capture_output=True, text=True, check=True).stdout


def process_memory_bytes(pid):
    """The driver's count of a process's GPU memory (nvidia-smi), 0 when it holds none."""
    for line in smi("--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits").splitlines():
        fields = [f.strip() for f in line.split(",")]
        if len(fields) == 2 and fields[0] == str(pid):
            return int(fields[1]) * (1 << 20)
    return 0


def card(index=0):
    """Name, driver, total and free bytes of GPU `index` (nvidia-smi's numbering)."""
    line = smi("-i", str(index), "--query-gpu=name,memory.total,memory.free,driver_version",
               "--format=csv,noheader,nounits").splitlines()[0]
    name, total_mib, free_mib, driver = [x.strip() for x in line.split(",")]
    return {"index": index, "name": name, "driver": driver, "bytes": int(total_mib) << 20,
            "free_bytes": int(free_mib) << 20}


def card_free_bytes(index=0):
    return int(smi("-i", str(index), "--query-gpu=memory.free", "--format=csv,noheader,nounits").split()[0]) << 20


_SIZE = re.compile(r"^([0-9]+(?:\.[0-9]{1,9})?)(Ki|Mi|Gi|Ti|K|k|M|G|T)?B?$")
_UNIT = {None: 1, "Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30, "Ti": 1 << 40,
         "K": 10 ** 3, "k": 10 ** 3, "M": 10 ** 6, "G": 10 ** 9, "T": 10 ** 12}


def parse_size(text):
    """Bytes of a size as cuslice's files write them (24GiB, 512MiB, 4G, 1073741824), rounded
    down; ValueError for anything else."""
    m = _SIZE.match(text.strip())
    if not m or (m.group(2) is None and "." in m.group(1)):
        raise ValueError(f"not a size: {text!r} (write e.g. 24GiB, 512MiB)")
    whole, _, frac = m.group(1).partition(".")
    unit = _UNIT[m.group(2)]
    return int(whole) * unit + (int(frac) * unit // 10 ** len(frac) if frac else 0)


class Scheduler:
    """cuslice-scheduler on a configuration of its own (checked first with `cuslice config
    check`), in a temporary folder; tenant_env(name) is the environment of a process that joins
    tenant `name` (the tenant needs `allow_env: true`). Use as a context manager."""

    def __init__(self, tree, config_text, log_path, tag="preemption"):
        self.tree = tree
        self.cli = os.path.join(tree, "bin", "cuslice")
        self.hook = os.path.join(tree, "lib", "libcuslice.so")
        self.work = tempfile.mkdtemp(prefix=f"cuslice-{tag}-")
        self.socket = os.path.join(self.work, "cuslice.sock")
        self.shm = f"/cuslice-{tag}-{os.getpid()}"
        self.config = os.path.join(self.work, "cuslice.yaml")
        self.log_path = log_path
        with open(self.config, "w") as f:
            f.write(config_text)
        self.daemon = None

    def __enter__(self):
        check = subprocess.run([self.cli, "config", "check", self.config], capture_output=True, text=True)
        if check.returncode != 0:
            raise RuntimeError(f"cuslice config check refused the benchmark's configuration "
                               f"({self.config}): {check.stderr.strip() or check.stdout.strip()}")
        self.log = open(self.log_path, "w")
        self.daemon = subprocess.Popen([os.path.join(self.tree, "bin", "cuslice-scheduler"), "--config", self.config,
                                        "--socket", self.socket, "--shm-name", self.shm, "--log-level", "info"],
                                       stdout=self.log, stderr=subprocess.STDOUT)
        end = time.monotonic() + 20
        while not os.path.exists(self.socket) and time.monotonic() < end and self.daemon.poll() is None:
            time.sleep(0.1)
        if not os.path.exists(self.socket):
            self.__exit__(None, None, None)
            raise RuntimeError(f"cuslice-scheduler did not start: see {self.log_path}")
        return self

    def __exit__(self, *exc):
        if self.daemon is not None:
            if self.daemon.poll() is None:
                self.daemon.send_signal(signal.SIGTERM)
                try:
                    self.daemon.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    self.daemon.kill()
                    self.daemon.wait()
            self.log.close()
            self.daemon = None
        for folder in (self.work + "-control", self.work):  # the scheduler makes the first beside the socket's
            shutil.rmtree(folder, ignore_errors=True)
        return False

    def tenant_env(self, base, name):
        e = dict(base)
        e.update({"LD_PRELOAD": self.hook, "CUSLICE_SOCKET": self.socket, "CUSLICE_TENANT": name,
                  "CUSLICE_LOG_LEVEL": "info"})
        return e

    def status(self):
        out = subprocess.run([self.cli, "status", "--json", "--socket", self.socket], capture_output=True, text=True)
        if out.returncode != 0:
            raise RuntimeError(f"cuslice status --json failed ({out.returncode}): {out.stderr.strip()}")
        return json.loads(out.stdout)


def tenant_status(doc, name):
    """From `cuslice status --json`: the tenant's record, and its bytes moved by preemption
    (both ways, every GPU, since the scheduler started)."""
    tenant = next((t for t in doc.get("tenants", []) if t.get("name") == name), None)
    if tenant is None:
        raise RuntimeError(f"cuslice status lists no tenant {name}")
    moved = sum(r.get("preemption_moved_bytes", 0) for g in doc.get("gpus", []) for r in g.get("tenants", [])
                if r.get("name") == name)
    return tenant, moved
