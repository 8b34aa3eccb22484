"""The fast way of suspending (docs/design/preemption.md, "Two ways to suspend"), end to end on one
simulated 4 GiB card whose memory holds data: a preemptible trainer's hook backs its cuMemAlloc
memory in movable chunks; a high-priority service's allocation that does not fit makes the
scheduler order the trainer's hook to hold its work and move only what is missing to host
memory; the service gets its memory; the trainer's memory comes back at the same addresses,
with its contents, once the service has left. Then what must not go wrong: a kernel or a copy
while the memory is away, a tenant whose hooks say they moved what they did not, a scheduler
that dies in the middle, a host that cannot take the memory, a pool too small for it."""
import os
import signal

# The card of every process of these scenarios (they share it: the daemon, the workers and
# this process, which reads the fake driver's state): set before the fake is first loaded.
os.environ["FAKE_CUDA_DEVICE_MEMORY"] = str(4 << 30)
os.environ["FAKE_CUDA_CONTEXT_BYTES"] = str(128 << 20)

from preemption_harness import CHECKPOINTED, GiB, MiB, RUNNING, Scenario, wait_for  # noqa: E402

CONFIG = """scheduler:
  gpu_memory: 4GiB
  preemption:
    allocation_wait: 30s
    resume_holdoff: 200ms
    host_reserve: 256MiB
    resume_margin: 128MiB
tenants:
  - name: serve
    allow_env: true
    priority: high
    memory: 3GiB
  - name: train
    allow_env: true
    priority: low
    memory: 4GiB
    preemptible: true
"""

# The room made beyond what a request lacks, by default.
ROOM_MARGIN = 1 * GiB

POOL = CONFIG.replace("    preemptible: true\n", "    preemptible: true\n    host_pool: 1GiB\n")

# A kernel that touches memory that is off the GPU fails (as a real one would fault), and so
# does every later call of its context: a launch that slipped past the hold shows.
TRAIN_ENV = {"FAKE_CUDA_FAULT_ON_UNMAPPED": "1"}


def trainer(s, env=None):
    """The trainer: 3 GiB in three allocations, filled with a pattern, one kernel run."""
    train = s.worker("train", {**TRAIN_ENV, **(env or {})})
    for _ in range(3):
        train.ok(f"alloc {GiB}")
    train.ok("fill 7")
    train.ok("launch")
    return train


def suspension(s, name="train"):
    return s.tenant_status(name)["suspension"]


def test_the_fast_way_moves_only_what_is_missing_and_brings_it_back():
    with Scenario(CONFIG) as s:
        train = trainer(s)
        held = s.fake.used(train.pid)
        wait_for(lambda: s.tenant_status("train")["movable_bytes"] >= 3 * GiB, 10, "the trainer's hook to report")
        serve = s.worker("serve")
        free = int(serve.ok("info")[2])
        # 2 GiB do not fit beside the trainer: about 1.3 GiB of it must move, plus the room
        # margin (1 GiB by default), not 3.
        serve.ok(f"alloc {2 * GiB}", timeout_s=30)
        missing = 2 * GiB - free + ROOM_MARGIN
        st = suspension(s)
        assert st["path"] == "fast", st
        moved = st["moved_out_bytes"]
        assert missing <= moved <= missing + 512 * MiB, (missing, moved)
        assert s.fake.used(train.pid) == held - moved
        # The driver's checkpoint had no part in it.
        assert s.fake.state(train.pid) == RUNNING and s.fake.checkpointed(train.pid) == 0
        assert st["state"] == "suspended"
        assert s.tenant_status("serve")["suspension"]["time_to_room_seconds"] > 0
        # The trainer's kernels and copies wait while its memory is away ...
        train.send("launch")
        assert not train.answered_within(0.5), "a kernel ran while the memory was away"
        # ... and go on once the service has left, on memory that is all there.
        serve.exit()
        words = train.answer(timeout_s=20)
        assert words[0] == "ok", f"{words}: {train.log_text()}"
        wait_for(lambda: suspension(s)["state"] == "running", 10, "the trainer to run again")
        assert s.fake.used(train.pid) == held
        train.ok("check 7")
        train.ok("copy")
        train.ok("launch")
        st = suspension(s)
        assert st["suspensions"] == 1 and st["suspend_seconds"] > 0 and st["resume_seconds"] > 0, st
        assert "its processes moved" in s.daemon.log_text()


# The service's first kernel loads its module, which takes card memory of its own (as a
# PyTorch process's first kernels, cuBLAS and cuDNN do).
SERVE_MODULE = {"FAKE_CUDA_MODULE_BYTES": str(768 * MiB)}


def test_the_service_computes_once_it_has_its_memory():
    """The room made keeps the margin: the service's first kernel finds the memory its module
    takes, without asking again."""
    with Scenario(CONFIG) as s:
        train = trainer(s)
        wait_for(lambda: s.tenant_status("train")["movable_bytes"] >= 3 * GiB, 10, "the trainer's hook to report")
        serve = s.worker("serve", SERVE_MODULE)
        serve.ok(f"alloc {2 * GiB}", timeout_s=30)
        serve.ok("fill 3")
        serve.ok("launch", timeout_s=30)
        st = suspension(s)
        assert st["path"] == "fast" and st["suspensions"] == 1, st
        serve.exit()
        wait_for(lambda: suspension(s)["state"] == "running", 20, "the trainer to run again")
        train.ok("check 7")
        train.ok("launch")


def test_a_launch_refused_for_memory_asks_for_room_again():
    """Without a margin, the service's first kernel does not fit beside what was moved: the
    hook asks for room as for an allocation, and the kernel runs once the trainer moved more."""
    with Scenario(CONFIG.replace("    resume_margin: 128MiB\n", "    resume_margin: 128MiB\n    room_margin: 1MiB\n")) as s:
        train = trainer(s)
        wait_for(lambda: s.tenant_status("train")["movable_bytes"] >= 3 * GiB, 10, "the trainer's hook to report")
        serve = s.worker("serve", SERVE_MODULE)
        serve.ok(f"alloc {2 * GiB}", timeout_s=30)
        first = suspension(s)["moved_out_bytes"]
        serve.ok("launch", timeout_s=30)
        assert suspension(s)["moved_out_bytes"] > first, suspension(s)
        serve.exit()
        wait_for(lambda: suspension(s)["state"] == "running", 20, "the trainer to run again")
        train.ok("check 7")


def test_a_tenant_whose_hooks_say_they_moved_what_they_did_not_is_checkpointed():
    with Scenario(CONFIG) as s:
        # Speaks to the scheduler itself: holds 3 GiB of the card, charged to its tenant, and
        # answers every order as done without moving anything.
        liar = s.process("train", hooked=False)
        liar.ok("init")
        liar.ok("attach")
        for _ in range(3):
            liar.ok(f"alloc {GiB}")
        liar.ok(f"reserve {3 * GiB}")
        liar.ok("lie")
        serve = s.worker("serve")
        # The card's own free memory shows the lie: asked again, the scheduler takes the rest
        # (what the liar did not say it moved: more than the service lacks) with the driver's
        # checkpoint, and the service gets its memory after all.
        serve.ok(f"alloc {3 * GiB // 2}", timeout_s=30)
        assert s.fake.state(liar.pid) == CHECKPOINTED
        assert "the driver's checkpoint" in s.daemon.log_text() or "checkpointed" in s.daemon.log_text()
        assert suspension(s)["path"] == "checkpoint"
        serve.exit()
        wait_for(lambda: s.fake.state(liar.pid) == RUNNING, 20, "the liar to be restored")


def test_a_scheduler_that_dies_in_the_middle_leaves_the_tenant_whole():
    # Copies take 2 s per GiB in the trainer: time to kill the scheduler while they run.
    with Scenario(CONFIG) as s:
        train = trainer(s, {"FAKE_CUDA_COPY_MS_PER_GIB": "2000"})
        held = s.fake.used(train.pid)
        wait_for(lambda: s.tenant_status("train")["movable_bytes"] >= 3 * GiB, 10, "the trainer's hook to report")
        serve = s.worker("serve")
        serve.send(f"alloc {2 * GiB}")
        wait_for(lambda: suspension(s)["state"] == "suspending", 10, "the suspension to begin")
        s.daemon.stop(signal.SIGKILL)
        # Nobody will answer the service now (it waits out its allocation_wait); the trainer's
        # hook finds itself alone, brings everything back and lets its work go on.
        wait_for(lambda: "went away while this process was suspended" in train.log_text(), 30,
                 "the trainer's hook to go on by itself")
        wait_for(lambda: s.fake.used(train.pid) == held, 10, "the trainer's memory to be back")
        train.ok("check 7")
        train.ok("launch")


def test_a_host_that_cannot_take_what_would_move_refuses_the_suspension(tmp_path):
    meminfo = tmp_path / "meminfo"
    meminfo.write_text(f"MemTotal: {64 * GiB // 1024} kB\nMemAvailable: {1 * GiB // 1024} kB\n")
    with Scenario(CONFIG, daemon_args=["--meminfo", str(meminfo)]) as s:
        train = trainer(s)
        wait_for(lambda: s.tenant_status("train")["movable_bytes"] >= 3 * GiB, 10, "the trainer's hook to report")
        serve = s.worker("serve")
        words = serve.do(f"alloc {2 * GiB}", timeout_s=30)
        assert words[0] == "err" and words[1] == "2", words
        reason = s.tenant_status("serve")["suspension"]["reason"]
        assert "to host memory" in reason, reason
        assert suspension(s)["state"] == "running"
        train.ok("launch")
        # With room on the host, only what is missing moves.
        meminfo.write_text(f"MemAvailable: {4 * GiB // 1024} kB\n")
        serve.ok(f"alloc {2 * GiB}", timeout_s=30)
        assert suspension(s)["path"] == "fast"


def test_a_host_pool_smaller_than_what_moves_takes_what_it_can():
    with Scenario(POOL) as s:
        train = trainer(s)
        held = s.fake.used(train.pid)
        # The pool is made in the background: 1 GiB pinned before anything must move.
        wait_for(lambda: s.tenant_status("train")["host_pool_bytes"] >= GiB, 20, "the host pool")
        # `cuslice status` shows what is pinned of what is to be: here all of it.
        assert s.tenant_status("train")["host_pool_target_bytes"] == GiB
        serve = s.worker("serve")
        serve.ok(f"alloc {2 * GiB}", timeout_s=30)
        st = suspension(s)
        assert st["path"] == "fast" and st["moved_out_bytes"] > GiB, st
        serve.exit()
        wait_for(lambda: s.fake.used(train.pid) == held, 20, "the trainer's memory to be back")
        train.ok("check 7")
        train.ok("launch")
        # The pool stays for the next time.
        assert s.tenant_status("train")["host_pool_bytes"] >= GiB
