"""Memory preemption end to end, on one simulated 16 GiB card: a preemptible low-priority
trainer holds most of it; a high-priority service's allocation that does not fit makes the
scheduler suspend the trainer (the fake driver's checkpoint API), the service gets its memory,
and the trainer is resumed once the memory is free again. Then the races: an allocation during
a suspension, a resume meeting a new allocation, a suspended process killed, a scheduler
restarted with a tenant suspended; and the refusals and failures an operator must see. All with
`fast: false`: the driver's checkpoint only (test_fast_preemption.py has the fast way)."""
import os
import re
import select
import signal
import subprocess
import time

import pytest

from preemption_harness import CHECKPOINTED, CLI, GiB, MiB, RUNNING, SOCKET_ATTACKER, Scenario, wait_for

CONFIG = """scheduler:
  gpu_memory: 16GiB
  preemption:
    allocation_wait: 30s
    resume_holdoff: 200ms
    host_reserve: 1GiB
    resume_margin: 256MiB
    fast: false
tenants:
  - name: serve
    allow_env: true
    priority: high
    memory: 13GiB
  - name: train
    allow_env: true
    priority: low
    memory: 15GiB
    preemptible: true
"""


KEEP = CONFIG.replace("    resume_margin: 256MiB\n", "    resume_margin: 256MiB\n    unsuspendable: keep\n")


def suspended_by_log(daemon, tenant):
    return f"tenant {tenant} suspended" in daemon.log_text()


def suspending_for_the_service(s):
    """The trainer holding 12 GiB, and the service's 8 GiB allocation, which does not fit,
    waiting while the trainer is being suspended for it (answered once it is)."""
    train = s.worker("train")
    train.ok(f"alloc {12 * GiB}")
    serve = s.worker("serve")
    serve.send(f"alloc {8 * GiB}")
    wait_for(lambda: s.tenant_status("train")["suspension"]["state"] == "suspending", 10,
             "the suspension to begin")
    return train, serve


def test_a_higher_priority_allocation_suspends_a_preemptible_tenant_and_it_resumes():
    with Scenario(CONFIG) as s:
        train = s.worker("train")
        train.ok(f"alloc {12 * GiB}")
        held = s.fake.used(train.pid)
        assert held >= 12 * GiB
        serve = s.worker("serve")
        # 3 GiB free: 8 do not fit until the trainer is suspended.
        serve.ok(f"alloc {8 * GiB}", timeout_s=30)
        assert s.fake.state(train.pid) == CHECKPOINTED
        assert s.fake.used(train.pid) == 0 and s.fake.checkpointed(train.pid) == held
        assert suspended_by_log(s.daemon, "train"), s.daemon.log_text()
        # The trainer's driver calls wait while it is suspended...
        train.send("sync")
        assert not train.answered_within(0.5), "a suspended process's call returned"
        # ... and go on once the service has left and the memory is free again.
        serve.exit()
        assert train.answer(timeout_s=20)[0] == "ok"
        assert s.fake.state(train.pid) == RUNNING
        assert s.fake.used(train.pid) == held
        wait_for(lambda: "tenant train resumed" in s.daemon.log_text(), 10, "the resumption to be logged")
        train.ok("free")
        st = s.tenant_status("train")["suspension"]
        assert st["state"] == "running"
        assert st["suspensions"] == 1
        assert st["suspended_seconds"] > 0 and st["suspend_seconds"] > 0 and st["resume_seconds"] > 0
        moved = sum(row["preemption_moved_bytes"] for gpu in s.status()["gpus"] for row in gpu["tenants"]
                    if row["name"] == "train")
        assert moved >= 2 * 12 * GiB, "out and back"


def test_an_allocation_during_a_suspension_waits_for_it():
    # Checkpoints take 0.25 s per GiB: about 3 s for the trainer, time for the others to act.
    with Scenario(CONFIG, daemon_env={"FAKE_CUDA_CHECKPOINT_MS_PER_GIB": "250"}) as s:
        train = s.worker("train")
        train.ok(f"alloc {12 * GiB}")
        serve = s.worker("serve")
        other = s.worker("serve")
        serve.send(f"alloc {8 * GiB}")
        wait_for(lambda: "suspending train" in s.daemon.log_text(), 10, "the suspension to begin")
        # Another process of the service: 3 GiB do not fit either, but the suspension under way
        # will free enough: it waits for that, nobody more is suspended.
        other.send(f"alloc {3 * GiB}")
        wait_for(lambda: "waits for the suspensions in progress" in s.daemon.log_text(), 10,
                 "the second request to wait")
        # The trainer's own allocation meanwhile waits at the lock, and is kept for its resume.
        wait_for(lambda: s.fake.state(train.pid) != RUNNING, 10, "the trainer to be locked")
        train.send(f"alloc {1 * GiB}")
        assert serve.answer(timeout_s=30)[0] == "ok"
        assert other.answer(timeout_s=30)[0] == "ok"
        assert s.fake.state(train.pid) == CHECKPOINTED
        assert s.daemon.log_text().count("suspending train") == 1
        assert not train.answered_within(0.3), "the trainer's call returned while it was suspended"
        assert s.tenant_status("train")["suspension"]["state"] == "suspended"
        serve.exit()
        other.exit()
        assert train.answer(timeout_s=30)[0] == "ok", "its allocation went through once it was back"
        assert s.fake.state(train.pid) == RUNNING


def test_a_resume_meets_a_new_high_priority_allocation():
    with Scenario(CONFIG, daemon_env={"FAKE_CUDA_CHECKPOINT_MS_PER_GIB": "250"}) as s:
        train = s.worker("train")
        train.ok(f"alloc {12 * GiB}")
        serve = s.worker("serve")
        serve.ok(f"alloc {8 * GiB}", timeout_s=30)
        serve.exit()
        wait_for(lambda: "resuming tenant train" in s.daemon.log_text(), 10, "the resumption to begin")
        # A new service arrives while the trainer's memory is coming back.
        again = s.worker("serve")
        words = again.ok(f"alloc {8 * GiB}", timeout_s=30)
        log = s.daemon.log_text()
        assert "tenant train resumed" in log, "the resumption ran to its end first"
        assert log.count("tenant train suspended") == 2, log
        assert s.fake.state(train.pid) == CHECKPOINTED
        assert s.tenant_status("train")["suspension"]["suspensions"] == 2
        assert float(words[1]) > 1000, "it waited for the restore, then the checkpoint"
        again.exit()
        wait_for(lambda: s.fake.state(train.pid) == RUNNING, 30, "the trainer to be resumed")


def test_a_stream_ordered_allocation_asks_for_room_too():
    with Scenario(CONFIG) as s:
        train = s.worker("train")
        train.ok(f"alloc {12 * GiB}")
        serve = s.worker("serve")
        serve.ok(f"async {8 * GiB}", timeout_s=30)  # cuMemAllocAsync: its pool grows by 8 GiB
        assert s.fake.state(train.pid) == CHECKPOINTED
        assert suspended_by_log(s.daemon, "train"), s.daemon.log_text()
        assert "asking the scheduler for room" in serve.log_text()
        serve.ok("free")
        serve.exit()
        wait_for(lambda: s.fake.state(train.pid) == RUNNING, 20, "the trainer to be resumed")


def test_a_suspended_process_killed_leaves_nothing_behind():
    with Scenario(CONFIG) as s:
        train = s.worker("train")
        train.ok(f"alloc {12 * GiB}")
        serve = s.worker("serve")
        serve.ok(f"alloc {8 * GiB}", timeout_s=30)
        # Beside the control socket, in the directory only the scheduler writes.
        journal = os.path.join(os.path.dirname(s.daemon.socket) + "-control", "cuslice.sock.suspended.json")
        assert os.path.exists(journal)
        train.kill()
        wait_for(lambda: s.tenant_status("train")["suspension"]["state"] == "running", 10,
                 "the killed tenant to be forgotten")
        assert s.tenant_status("train")["pids"] == []
        wait_for(lambda: not os.path.exists(journal), 10, "the journal to forget it")
        assert s.fake.state(train.pid) is None
        # Its memory is nobody's: the service can take more.
        serve.ok(f"alloc {3 * GiB}")
        assert s.fake.used_all() == s.fake.used(serve.pid)


def test_a_process_joining_a_suspended_tenant_waits_for_its_resumption():
    with Scenario(CONFIG) as s:
        train = s.worker("train")
        train.ok(f"alloc {12 * GiB}")
        serve = s.worker("serve")
        serve.ok(f"alloc {8 * GiB}", timeout_s=30)
        assert s.fake.state(train.pid) == CHECKPOINTED
        # Another process of the suspended tenant starts: it registers, then waits in its first
        # CUDA call, holding nothing on the card.
        late = s.process("train")
        late.send("init")
        wait_for(lambda: late.pid in s.tenant_status("train")["pids"], 10, "the late process to register")
        assert not late.answered_within(1.0), "a process of a suspended tenant started on the GPU"
        assert s.fake.state(late.pid) is None, "it waits in its hook, before its first call into the driver"
        assert s.tenant_status("train")["suspension"]["state"] == "suspended"
        serve.exit()
        assert late.answer(timeout_s=30)[0] == "ok", "it goes on once its tenant is resumed"
        assert s.fake.state(train.pid) == RUNNING
        late.ok(f"alloc {1 * GiB}")
        assert "waited for the tenant to be resumed" in late.log_text()


def test_a_card_filled_by_a_process_without_the_hook_keeps_the_tenant_suspended():
    """A restore that runs out of memory leaves the tenant's GPU state lost: a suspended tenant
    resumes only when the driver's free memory, not only the tenants' counters, has room."""
    with Scenario(CONFIG, daemon_env={"FAKE_NVML_DEVICE_PROCESSES": "1"}) as s:
        train = s.worker("train")
        train.ok(f"alloc {12 * GiB}")
        held = s.fake.used(train.pid)
        serve = s.worker("serve")
        serve.ok(f"alloc {8 * GiB}", timeout_s=30)
        assert s.fake.state(train.pid) == CHECKPOINTED
        # In no tenant, without the hook: the usage watchdog sees it in the driver's list.
        other = s.process("serve", hooked=False)
        other.ok("init")
        other.ok(f"alloc {6 * GiB}")
        wait_for(lambda: "runs without the hook" in s.daemon.log_text(), 20, "the usage watchdog to see it")
        serve.exit()
        # Many hold-offs later the tenant is still suspended, whole.
        time.sleep(2)
        assert s.fake.state(train.pid) == CHECKPOINTED, s.daemon.log_text()
        assert s.tenant_status("train")["suspension"]["state"] == "suspended"
        other.exit()
        wait_for(lambda: s.fake.state(train.pid) == RUNNING, 30, "the tenant to be resumed")
        assert s.fake.used(train.pid) == held
        train.ok("sync")


STRANGERS = """scheduler:
  gpu_memory: 16GiB
  preemption:
    allocation_wait: 30s
    resume_holdoff: 200ms
    host_reserve: 1GiB
    fast: false
tenants:
  - name: hi
    allow_env: true
    priority: high
    memory: 15GiB
    preemptible: true
  - name: lo
    allow_env: true
    priority: low
    memory: 1GiB
"""


def test_a_request_no_allocation_could_need_suspends_nobody():
    """A request is the asker's word: a low tenant that holds nothing asks four times its quota,
    saying the card is full. Its quota is a guarantee, which any preemptible tenant gives way
    to, but no allocation of its could need that much: refused, and nobody is suspended."""
    with Scenario(STRANGERS) as s:
        hi = s.worker("hi")
        hi.ok(f"alloc {12 * GiB}")
        lo = s.process("lo", hooked=False)
        lo.ok("init")
        lo.ok("attach")
        for _ in range(3):
            words = lo.ok(f"ask {4 * GiB}")
            assert words[2] == "refused", words
        assert s.fake.state(hi.pid) == RUNNING
        assert s.tenant_status("hi")["suspension"]["suspensions"] == 0
        assert "more than its quota" in s.daemon.log_text()
        words = lo.ok(f"ask {64 * GiB}")
        assert words[2] == "refused", words
        assert "more than the card holds" in s.daemon.log_text()
        # Within its quota the guarantee holds as before.
        assert lo.ok(f"ask {1 * GiB}")[2] == "retry"
        wait_for(lambda: s.fake.state(hi.pid) == CHECKPOINTED, 10, "hi to give way to lo's guarantee")


def test_a_process_whose_user_holds_every_connection_does_not_run_ungated():
    """Past a user's connections the daemon says "full" before it closes one: a hook that
    reached a scheduler and got no room waits, then fails rather than run unscheduled."""
    with Scenario(CONFIG) as s:
        # One connection more than a user may hold; the daemon closes silent ones after 5 s.
        flood = subprocess.Popen([SOCKET_ATTACKER, "connections", s.daemon.socket, "513"],
                                 stdout=subprocess.PIPE, text=True)
        try:
            wait_for(lambda: "refused a connection" in s.daemon.log_text(), 10, "the user's connections to be taken")
            reload = subprocess.run([CLI, "reload", "--socket", s.daemon.socket], capture_output=True, text=True,
                                    timeout=30)
            assert reload.returncode == 0, f"the control socket answers beside the flood: {reload.stderr}"
            late = s.process("serve")
            words = late.do("init", timeout_s=30)
        finally:
            flood.wait(timeout=30)
        # It registered once the daemon closed the silent connections, or it gave up: either
        # way it never ran beside the scheduler unscheduled.
        log = late.log_text()
        assert "compute ungated" not in log, log
        registered = late.pid in s.tenant_status("serve")["pids"]
        assert (words[0] == "ok" and registered) or words[0] == "err", (words, log)
        # With room again, a process registers.
        again = s.worker("serve")
        assert again.pid in s.tenant_status("serve")["pids"]


BESIDE = CONFIG + """  - name: other
    allow_env: true
    priority: low
    memory: 4GiB
    preemptible: true
"""


def test_room_being_made_is_not_given_to_a_tenant_nobody_would_give_way_to():
    """While the trainer is being suspended for the service, a low tenant no one may be
    suspended for asks for room: it is refused at once, not told to wait for the service's
    room and handed it."""
    with Scenario(BESIDE, daemon_env={"FAKE_CUDA_CHECKPOINT_MS_PER_GIB": "1000"}) as s:
        train, serve = suspending_for_the_service(s)
        other = s.worker("other")
        words = other.do(f"alloc {3 * GiB}", timeout_s=60)
        assert words[0] == "err", f"{words}: {s.daemon.log_text()}"
        assert "other's allocation of 3.0 GiB on GPU 0 cannot fit" in s.daemon.log_text()
        assert serve.answer(timeout_s=60)[0] == "ok"


def test_a_joining_process_that_does_not_wait_is_suspended_by_the_scheduler():
    # It registers itself and uses the driver without the hook: nothing makes it wait, so the
    # scheduler suspends it with its tenant through the driver.
    with Scenario(CONFIG) as s:
        train = s.worker("train")
        train.ok(f"alloc {12 * GiB}")
        serve = s.worker("serve")
        serve.ok(f"alloc {8 * GiB}", timeout_s=30)
        rogue = s.process("train", hooked=False)
        rogue.ok("attach")
        rogue.ok("init")
        rogue.ok(f"alloc {1 * GiB}")
        wait_for(lambda: s.fake.state(rogue.pid) == CHECKPOINTED, 10, "the scheduler to suspend the late process")
        assert s.fake.used(rogue.pid) == 0 and s.fake.checkpointed(rogue.pid) >= 1 * GiB
        assert f"pid {rogue.pid} joined it while it is suspended, and is suspended too" in s.daemon.log_text()
        rogue.send("sync")
        assert not rogue.answered_within(0.5), "its driver calls wait like the others'"
        serve.exit()
        assert rogue.answer(timeout_s=30)[0] == "ok"
        wait_for(lambda: s.fake.state(train.pid) == RUNNING, 20, "the tenant to be resumed")
        assert s.fake.state(rogue.pid) == RUNNING and s.fake.used(rogue.pid) >= 1 * GiB


def test_a_restarted_scheduler_resumes_what_the_old_one_suspended():
    with Scenario(CONFIG) as s:
        train = s.worker("train")
        train.ok(f"alloc {12 * GiB}")
        held = s.fake.used(train.pid)
        serve = s.worker("serve")
        serve.ok(f"alloc {8 * GiB}", timeout_s=30)
        train.send("sync")  # waits inside the driver: this process cannot register again
        s.daemon.stop(signal.SIGKILL)
        serve.exit()
        assert s.fake.state(train.pid) == CHECKPOINTED
        s.daemon.start()
        assert train.answer(timeout_s=30)[0] == "ok"
        assert "left suspended by an earlier scheduler" in s.daemon.log_text()
        assert s.fake.state(train.pid) == RUNNING
        assert s.fake.used(train.pid) == held
        # It joins the new scheduler with its memory.
        train.ok("info")
        wait_for(lambda: s.tenant_status("train")["pids"] == [train.pid], 10, "the trainer to register again")


def test_what_the_checkpoint_cannot_move_is_stopped_and_the_rest_suspended():
    with Scenario(CONFIG) as s:
        train = s.worker("train")
        train.ok(f"alloc {8 * GiB}")
        managed = s.worker("train")
        managed.ok(f"managed {4 * GiB}")
        wait_for(lambda: f"its pid {managed.pid} says it uses managed memory" in s.daemon.log_text(), 10,
                 "the claim to be reported")
        reason = s.tenant_status("train")["suspension"]["reason"]
        assert f"process {managed.pid} says it holds managed memory" in reason, reason
        assert "unsuspendable: stop" in reason, reason
        serve = s.worker("serve")
        serve.ok(f"alloc {8 * GiB}", timeout_s=30)
        # No checkpoint was tried on it: it was stopped, and the rest of its tenant suspended.
        assert managed.process.wait(timeout=10) == -signal.SIGKILL
        assert s.fake.state(train.pid) == CHECKPOINTED
        log = s.daemon.log_text()
        assert f"pid {managed.pid} stopped (SIGKILL) instead of suspended" in log, log
        assert f"checkpoint of process {managed.pid}" not in log, log
        serve.exit()
        wait_for(lambda: s.fake.state(train.pid) == RUNNING, 20, "the rest of the tenant to be resumed")
        assert s.fake.used(train.pid) >= 8 * GiB


def test_a_process_that_only_says_it_cannot_be_moved_spares_nobody():
    # A process of the tenant writes the claim into its own record, as any of them can, and
    # uses nothing the checkpoint cannot move: the claim buys it nothing.
    with Scenario(CONFIG) as s:
        train = s.worker("train")
        train.ok(f"alloc {12 * GiB}")
        liar = s.process("train", hooked=False)
        liar.ok("attach")
        liar.ok("init")
        liar.ok(f"claim {2 | 1}")  # managed memory and CUDA IPC
        wait_for(lambda: f"its pid {liar.pid} says it uses" in s.daemon.log_text(), 10, "the claim to be reported")
        serve = s.worker("serve")
        serve.ok(f"alloc {8 * GiB}", timeout_s=30)
        assert liar.process.wait(timeout=10) == -signal.SIGKILL
        assert s.fake.state(train.pid) == CHECKPOINTED
        assert s.tenant_status("train")["suspension"]["state"] == "suspended"
        serve.exit()
        wait_for(lambda: s.fake.state(train.pid) == RUNNING, 20, "the trainer to be resumed")


def test_a_process_cannot_say_for_another_that_it_cannot_be_moved():
    # A process of the tenant writes the claim into its sibling's record, as any process of the
    # tenant can write: the sibling must still be suspended, not stopped.
    with Scenario(CONFIG) as s:
        train = s.worker("train")
        train.ok(f"alloc {12 * GiB}")
        mallory = s.process("train", hooked=False)
        mallory.ok("attach")
        mallory.ok(f"claim-for {train.pid} {2 | 1}")
        serve = s.worker("serve")
        serve.ok(f"alloc {8 * GiB}", timeout_s=30)
        assert s.fake.state(train.pid) == CHECKPOINTED
        assert train.exited() is None, "stopped on another process's word"
        assert f"pid {train.pid} stopped" not in s.daemon.log_text()
        serve.exit()
        wait_for(lambda: s.fake.state(train.pid) == RUNNING, 20, "the trainer to be resumed")


def test_with_keep_a_tenant_that_says_it_cannot_be_moved_is_not_suspended():
    with Scenario(KEEP) as s:
        train = s.worker("train")
        train.ok(f"managed {12 * GiB}")
        wait_for(lambda: f"its pid {train.pid} says it uses managed memory" in s.daemon.log_text(), 10,
                 "the claim to be reported")
        serve = s.worker("serve")
        words = serve.do(f"alloc {8 * GiB}", timeout_s=30)
        assert words[0] == "err" and words[1] == "2", words  # CUDA_ERROR_OUT_OF_MEMORY
        assert float(words[2]) < 10_000, "refused at once, not after the allocation wait"
        assert s.fake.state(train.pid) == RUNNING and train.exited() is None
        reason = s.tenant_status("serve")["suspension"]["reason"]
        assert "managed memory" in reason and "train" in reason, reason
        assert "unsuspendable: keep" in s.tenant_status("train")["suspension"]["reason"]
        assert f"process {train.pid} says it holds managed memory" in s.daemon.log_text()


def test_what_the_driver_refuses_unannounced_is_stopped_and_the_rest_suspended():
    # Managed memory the hook never saw (a library that maps it itself): the driver's refusal is
    # the truth, and it leaves the process FAILED, as NVIDIA warns it may.
    with Scenario(CONFIG, daemon_env={"FAKE_CUDA_CHECKPOINT_REFUSE": "managed,ipc,failed"}) as s:
        train = s.worker("train")
        train.ok(f"alloc {8 * GiB}")
        hidden = s.worker("train", env={"FAKE_CUDA_HIDDEN_BLOCKERS": "managed"})
        hidden.ok(f"alloc {4 * GiB}")
        serve = s.worker("serve")
        serve.ok(f"alloc {8 * GiB}", timeout_s=30)
        assert hidden.process.wait(timeout=10) == -signal.SIGKILL
        assert s.fake.state(train.pid) == CHECKPOINTED
        log = s.daemon.log_text()
        assert re.search(rf"pid {hidden.pid} stopped \(SIGKILL\) instead of suspended: checkpoint of process "
                         rf"{hidden.pid} failed: CUDA_ERROR_NOT_SUPPORTED.*the driver left it FAILED", log), log
        serve.exit()
        wait_for(lambda: s.fake.state(train.pid) == RUNNING, 20, "the rest of the tenant to be resumed")


def test_too_little_host_memory_refuses_the_suspension(tmp_path):
    meminfo = tmp_path / "meminfo"
    meminfo.write_text(f"MemTotal: {64 * GiB // 1024} kB\nMemAvailable: {8 * GiB // 1024} kB\n")
    with Scenario(CONFIG, daemon_args=["--meminfo", str(meminfo)]) as s:
        train = s.worker("train")
        train.ok(f"alloc {12 * GiB}")
        serve = s.worker("serve")
        words = serve.do(f"alloc {8 * GiB}", timeout_s=30)
        assert words[0] == "err" and words[1] == "2", words
        assert s.fake.state(train.pid) == RUNNING
        reason = s.tenant_status("serve")["suspension"]["reason"]
        assert "to host memory" in reason and "8.0 GiB available" in reason, reason
        # With room on the host it goes through.
        meminfo.write_text(f"MemAvailable: {32 * GiB // 1024} kB\n")
        serve.ok(f"alloc {8 * GiB}", timeout_s=30)
        assert s.fake.state(train.pid) == CHECKPOINTED


def test_a_failed_resume_is_reported_with_what_to_do():
    with Scenario(CONFIG, daemon_env={"FAKE_CUDA_CHECKPOINT_FAIL": "restore-fatal"}) as s:
        train = s.worker("train")
        train.ok(f"alloc {12 * GiB}")
        serve = s.worker("serve")
        serve.ok(f"alloc {8 * GiB}", timeout_s=30)
        serve.exit()
        wait_for(lambda: s.tenant_status("train")["suspension"]["state"] == "failed", 20, "the resumption to fail")
        st = s.tenant_status("train")["suspension"]
        assert f"process {train.pid}" in st["reason"] and "start the job again" in st["reason"], st
        assert "resumption failed" in s.daemon.log_text()
        table = subprocess_table(s)
        assert "failed" in table and "start the job again" in table, table
        # Never retried on its own; gone with its process.
        train.kill()
        wait_for(lambda: s.tenant_status("train")["suspension"]["state"] == "running", 10, "the tenant to be forgotten")


def test_no_preemption_without_preemptible_tenants():
    config = CONFIG.replace("    preemptible: true\n", "").replace("memory: 15GiB", "memory: 4GiB").replace(
        "memory: 13GiB", "memory: 16GiB")
    with Scenario(config) as s:
        train = s.worker("train")
        train.ok(f"alloc {3 * GiB}")
        hog = s.worker("serve")
        hog.ok(f"alloc {11 * GiB}")
        serve = s.worker("serve")
        words = serve.do(f"alloc {2 * GiB}", timeout_s=30)
        assert words[0] == "err" and words[1] == "2" and float(words[2]) < 1000, words
        assert "checkpoint API" not in s.daemon.log_text(), "the driver was never opened for it"
        assert s.fake.state(train.pid) == RUNNING


def subprocess_table(s):
    import subprocess
    from preemption_harness import CLI
    return subprocess.run([CLI, "status", "--socket", s.daemon.socket], capture_output=True, text=True,
                          check=True).stdout


def test_a_flood_of_memory_requests_during_a_suspension_leaves_the_scheduler_responsive():
    # A suspension that takes half a minute (three seconds per GiB), and meanwhile 250
    # registrations sending 16 requests for room each. The scheduler must go on answering
    # `cuslice status` while the flood comes in, serve the flood itself quickly, and stop
    # serving at once when told. The bounds are generous (a loaded machine passes them):
    # deciding every pending request again, with /proc/meminfo read for each, on every request
    # kept the loop busy for over half a minute.
    with Scenario(CONFIG, daemon_env={"FAKE_CUDA_CHECKPOINT_MS_PER_GIB": "3000"}) as s:
        train, serve = suspending_for_the_service(s)
        started = time.monotonic()
        flood = subprocess.Popen([SOCKET_ATTACKER, "requests", s.daemon.socket, "serve", "250", "16"],
                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        try:
            slowest = 0.0
            while not select.select([flood.stdout], [], [], 0)[0] and time.monotonic() - started < 60:
                asked = time.monotonic()
                subprocess.run([CLI, "status", "--socket", s.daemon.socket], capture_output=True, check=True,
                               timeout=60)
                slowest = max(slowest, time.monotonic() - asked)
            sent = flood.stdout.readline().split()
            assert sent and sent[0] == "sent" and int(sent[1]) > 1000, sent
            served = time.monotonic() - started
            assert slowest < 3, f"cuslice status waited {slowest:.1f} s behind the requests"
            assert served < 15, f"the flood's registrations were answered over {served:.1f} s"
            # Stopped at once: hooks told, nothing served; the process itself exits once the
            # driver call in flight (the checkpoint) returns.
            s.daemon.process.send_signal(signal.SIGTERM)
            wait_for(lambda: "info: stopped" in s.daemon.log_text(), 3, "the scheduler to stop on SIGTERM")
        finally:
            flood.stdin.close()
            flood.wait(timeout=30)
