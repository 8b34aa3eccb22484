"""Compute scenarios: tenants share the GPU time of one simulated device by the scheduler's policy.

Each test starts cuslice-scheduler with its own configuration, runs tenant_worker processes
under LD_PRELOAD=libcuslice.so against the fake driver's shared device, and checks what each
tenant got over a common window (compute_harness.py). Shares are of simulated kernel time, as
the fake driver counted it, so they do not depend on how fast this machine runs the processes.

Why the tolerances hold on a loaded 2-core machine: kernels are simulated (waiting costs no
CPU), so the box's load only delays when processes react, not how much device time a slice
gives. Over a 3 s window with 20 ms slices there are ~150 slices; each hand-over may cost its
tenant up to one kernel plus CUSLICE_MAX_QUEUED (500 us), i.e. about 1% of a tenant's
time per 1% of handovers: +-5 points covers it with room for scheduling noise.

What a loaded box can still do is hold a process off the CPU for tens of milliseconds. Each
scenario samples that beside its workers (compute_harness.Lateness) and prints it; bounds on
a host-side time add the lateness seen in the same window. And the load only ever makes these
measurements worse (a late process takes less device time, waits longer, keeps its queue
longer), never better: a scenario whose checks fail is measured again, up to three times in
all (settle), and passes on the first clean measurement. A fault of cuslice fails every time;
a moment of load does not.
"""
import re
import signal
import statistics
import time

import pytest

from compute_harness import MS, Scenario, hook_gates_launches, now_ns, sleep_until_ns

SPIN = {"mode": "spin", "kernel_us": 2000, "sync_every": 4}
SERVICE_AND_BATCH = """
scheduler: {quantum: 20ms}
tenants:
  - {name: service, allow_env: true, priority: high}
  - {name: batch, allow_env: true, priority: low}
"""
WINDOW_S = 3.0


@pytest.fixture(autouse=True, scope="session")
def launch_gating_exists():
    # Without launch gating every scenario but the ungated one is meaningless, and the ungated
    # one would pass for the wrong reason: skip them all, loudly, rather than pass.
    if not hook_gates_launches():
        pytest.exit("SKIPPED: libcuslice.so exports no cuLaunchKernel (launch gating has not "
                    "landed); the compute scenarios need it", returncode=77)


def settle(measure, attempts=3):
    """measure() runs a scenario and asserts on it; on this box's load, it may run again."""
    for attempt in range(1, attempts + 1):
        try:
            return measure()
        except AssertionError as e:
            if attempt == attempts:
                raise
            print(f"attempt {attempt} of {attempts} failed ({str(e).splitlines()[0][:300]}): measuring again")


def valid(reports):
    """Every worker ran cleanly and started on time, so the window is common to all."""
    for r in reports:
        assert r["returncode"] == 0, r
        assert r["late_ns"] < 200 * MS, f"worker started late, the window is not common: {r}"
    return reports


def gated(world, tenants):
    """The scheduler handed the token to each tenant: their launches really were gated."""
    holders = set(world.daemon.token_holders())
    for t in tenants:
        assert t in holders, (f"tenant {t} never held the token: its launches were not gated "
                              f"(holders seen: {sorted(holders)})")


def exit_counts(report):
    """The hook's exit counters (CUSLICE_LOG_LEVEL=debug) from a worker's stderr: name -> n."""
    lines = [line for line in report["stderr"].splitlines() if "at exit:" in line]
    assert lines, f"no exit counters in the worker's log: {report['stderr'][-2000:]}"
    text = lines[-1].split("at exit:", 1)[1]
    found = re.findall(r"(launches held back|gates opened by the watchdog|gates|marks|records|queries|stalls) (\d+)",
                       text)
    return {name: int(n) for name, n in found}


def shares(reports):
    """Percent of the device time the workers got together, per worker."""
    total = sum(r["busy_ns"] for r in reports)
    assert total > 0, reports
    return [100.0 * r["busy_ns"] / total for r in reports]


def utilisation(report, window_s=WINDOW_S):
    return report["busy_ns"] / (window_s * 1e9)


def describe(reports):
    return "; ".join(f"{r['tenant']}: {r['busy_ns'] / 1e6:.0f} ms in {r['kernels']} kernels"
                     for r in reports)


def test_two_tenants_share_70_30():
    config = """
scheduler: {quantum: 20ms}
tenants:
  - {name: a, allow_env: true, compute: {share: 70%}}
  - {name: b, allow_env: true, compute: {share: 30%}}
"""

    def measure():
        with Scenario(config) as world:
            reports = valid(world.run([dict(SPIN, tenant="a"), dict(SPIN, tenant="b")], WINDOW_S))
            gated(world, "ab")
        a, b = shares(reports)
        print(f"70/30: a {a:.1f}% b {b:.1f}% ({describe(reports)}); box lateness {world.lateness}")
        assert abs(a - 70) <= 5, describe(reports)
    settle(measure)


def test_three_tenants_share_50_30_20():
    config = """
scheduler: {quantum: 20ms}
tenants:
  - {name: a, allow_env: true, compute: {share: 50%}}
  - {name: b, allow_env: true, compute: {share: 30%}}
  - {name: c, allow_env: true, compute: {share: 20%}}
"""

    def measure():
        with Scenario(config) as world:
            reports = valid(world.run([dict(SPIN, tenant=t) for t in "abc"], WINDOW_S))
            gated(world, "abc")
        got = shares(reports)
        print("50/30/20: " + " ".join(f"{g:.1f}%" for g in got) + f" ({describe(reports)}); "
              f"box lateness {world.lateness}")
        for wanted, g in zip((50, 30, 20), got):
            assert abs(g - wanted) <= 5, describe(reports)
    settle(measure)


def test_limit_caps_a_tenant_alone():
    # limit_window 1 s: over 4 s (whole windows; the first starts empty) the cap allows 30% of
    # the device, whatever the demand. A slice read late and stamped at the read gave 25%
    # here: each left the window a slice late, one slice every 1.3 s.
    config = """
scheduler: {quantum: 20ms, limit_window: 1s}
tenants:
  - {name: capped, allow_env: true, compute: {limit: 30%}}
"""

    def measure():
        with Scenario(config) as world:
            [report] = valid(world.run([dict(SPIN, tenant="capped")], 4.0))
            gated(world, ["capped"])
        used = 100 * utilisation(report, 4.0)
        held_off = report["run_delay_ns"] / 4e9
        print(f"limit 30%: used {used:.1f}% ({describe([report])}); its threads waited for a CPU "
              f"{100 * held_off:.0f}% of the window; box lateness {world.lateness}")
        # Never over the cap, however loaded the box.
        assert used <= 33, describe([report])
        # Not under it either, where the box let the worker have the CPU (schedstat): held off
        # it, the worker launches less than the cap allows.
        assert used >= 27 or held_off > 0.25, describe([report])
    settle(measure)


def test_high_priority_latency_beside_a_low_priority_spinner():
    request = {"tenant": "service", "mode": "request", "kernel_us": 1000, "period_ms": 20}
    settle(lambda: high_priority_latency(request))


def high_priority_latency(request):
    with Scenario(SERVICE_AND_BATCH) as world:
        [solo] = valid(world.run([request], 2.0))
        service, batch = valid(world.run([request, dict(SPIN, tenant="batch")], WINDOW_S))
        gated(world, ["service", "batch"])
    print(f"priority: solo p50 {solo['p50_us']:.0f} us p99 {solo['p99_us']:.0f} us; beside the "
          f"spinner p50 {service['p50_us']:.0f} us p99 {service['p99_us']:.0f} us "
          f"max {service['max_us']:.0f} us; spinner got {100 * utilisation(batch):.0f}%; box lateness {world.lateness}")
    # A request that arrives while the spinner holds the token waits for the token to be taken
    # back and for the spinner's queued work to drain: the hook bounds that work to about
    # CUSLICE_MAX_QUEUED (500 us) beyond the kernel running, so a typical request waits about
    # one spinner kernel (2 ms). Checked on the median: tail latencies on a loaded 2-core box
    # are set by the box (solo p99 alone varies 5-20 ms here); the H100 benchmark measures
    # p99 (bench/compute). Without the queue bound the median was 5.8 ms over solo.
    bound = solo["p50_us"] + SPIN["kernel_us"] + 500 + 1500 + world.lateness["p50_us"]
    assert service["p50_us"] <= bound, (solo, service, world.lateness)
    assert service["requests"] >= 0.9 * solo["requests"] * WINDOW_S / 2.0, (solo, service)
    # The spinner is not starved: it gets what the service leaves (~95% of the device).
    assert utilisation(batch) >= 0.5, batch


def test_queue_bound_is_time_not_a_count_of_kernels():
    """Below a higher-priority tenant, a trainer of mixed kernel lengths keeps about
    CUSLICE_PREEMPT_QUEUED of work queued beyond the kernel running, whatever the lengths.

    The trainer launches 2 kernels of 3 ms then 300 of 10 us. A bound counted in kernels at
    their mean length (30 us) would let both long ones queue at once (6 ms ahead of a request);
    a bound on their learnt durations keeps one. The service sends a short request every 0.5 s
    and otherwise idles, so the queue is the trainer's: how deep it gets does not depend on how
    fast this box runs the processes (a slow one only makes it shallower)."""
    idle_service = {"tenant": "service", "mode": "request", "kernel_us": 100, "period_ms": 500}
    trainer = {"tenant": "batch", "mode": "spin", "kernel_us": 3000, "sync_every": 2,
               "short_us": 10, "shorts": 300, "env": {"CUSLICE_LOG_LEVEL": "debug"}}
    settle(lambda: queue_bound(idle_service, trainer))


def queue_bound(idle_service, trainer):
    with Scenario(SERVICE_AND_BATCH) as world:
        _, batch = valid(world.run([idle_service, trainer], WINDOW_S))
    counts = exit_counts(batch)
    held_off = batch["run_delay_ns"] / (WINDOW_S * 1e9)
    print(f"mixed trainer below a high-priority tenant: at most {batch['max_queue_us']:.0f} us "
          f"queued after a launch; got {100 * utilisation(batch):.0f}% of the device; its threads waited "
          f"for a CPU {100 * held_off:.0f}% of the window; {counts}; box lateness {world.lateness}")
    # The bound is kept with completions seen through the marks the launching thread puts
    # (parking), not only through the monitor's records.
    assert counts.get("marks", 0) > 0, counts
    # One long kernel (3 ms) plus the bound (250 us), with room for estimates still settling.
    assert 0 < batch["max_queue_us"] <= 3000 + 250 + 1000, batch
    # Short kernels are many in flight, so the trainer keeps the device busy: 60% of it on an
    # idle box. Held launches go out when a thread of the process sees room, so time its
    # threads spent waiting for a CPU (the box's load) can leave the device idle: that much less.
    assert utilisation(batch) >= 0.6 - held_off, (batch, held_off)


def test_held_work_after_a_pause_is_not_taken_for_stalled():
    """Held back work that makes no progress for 20 ms with the token is let run in full (what
    was let run may wait for it): the bound is lost meanwhile. The 20 ms are counted only over
    looks that find held work and hold the token. The trainer here pauses 30 ms between bursts
    of two 2 ms kernels; the second waits behind a gate for the first. Counted from the last
    look with progress, as before, the clock had run through the pause, and the first look at
    the next held kernel let it run at once: 4 ms queued instead of 2 ms and the bound."""
    idle_service = {"tenant": "service", "mode": "request", "kernel_us": 100, "period_ms": 500}
    trainer = {"tenant": "batch", "mode": "spin", "kernel_us": 2000, "sync_every": 2,
               "short_us": 10, "shorts": 1, "pause_us": 30000, "env": {"CUSLICE_LOG_LEVEL": "debug"}}
    with Scenario(SERVICE_AND_BATCH) as world:
        _, batch = valid(world.run([idle_service, trainer], WINDOW_S))
    counts = exit_counts(batch)
    print(f"bursts below a high-priority tenant: at most {batch['max_queue_us']:.0f} us queued; {counts}")
    assert counts.get("gates", 0) > 0, counts
    assert counts.get("stalls", -1) == 0, counts
    # One 2 ms kernel and the bound (250 us), with room for a loaded box.
    assert 0 < batch["max_queue_us"] <= 2000 + 250 + 750, batch


def test_a_parked_launch_does_not_stop_the_low_priority_thread():
    """Below a higher-priority tenant, a launch made while that tenant holds the GPU is held
    back on the GPU behind a gate (parking) and the launching thread goes on; with parking off
    (CUSLICE_PARK_QUEUED=0us, the control) the thread waits on the CPU for the token. The
    service runs a 40 ms kernel every 100 ms, so the batch loses the token often and for long."""
    service = {"tenant": "service", "mode": "request", "kernel_us": 40000, "period_ms": 100}
    batch = {"tenant": "batch", "mode": "spin", "kernel_us": 100, "sync_every": 20}
    settle(lambda: parked_launches(service, batch))


def parked_launches(service, batch):
    with Scenario(SERVICE_AND_BATCH) as world:
        _, parked = valid(world.run([service, batch], WINDOW_S))
        parked_lateness = world.lateness
        _, waited = valid(world.run([service, dict(batch, env={"CUSLICE_PARK_QUEUED": "0us"})], WINDOW_S))
    print(f"longest launch call below a busy high-priority tenant: parked {parked['max_launch_us']:.0f} us "
          f"({parked['slow_launches']} of 10 ms or more), waiting on the CPU {waited['max_launch_us']:.0f} us "
          f"({waited['slow_launches']}); device got {100 * utilisation(parked):.0f}% / "
          f"{100 * utilisation(waited):.0f}%; box lateness {parked_lateness}")
    # The control shows what the scenario provokes: launches that wait for the service's kernel.
    assert waited["max_launch_us"] >= 25_000 and waited["slow_launches"] >= 8, waited
    # Parked, no launch waits for it. On a loaded box a thread of the hook that opens gates may
    # be kept off the CPU until the work held back reaches its bound, and a launch then waits:
    # rarely, where without parking every service kernel makes one wait.
    assert parked_slow_launches_ok(parked, waited, parked_lateness), (parked, waited, parked_lateness)
    # And holding launches back on the GPU costs the batch no device time.
    assert utilisation(parked) >= 0.9 * utilisation(waited), (parked, waited)


def test_a_context_reset_below_a_higher_priority_tenant_is_survived():
    """The gates' words are pinned host memory; pinned memory goes with the context it was
    pinned in, and cudaDeviceReset takes the primary context. A batch parked below a busy
    service resets its primary context twice and goes on: it must neither crash (the monitor
    and the launching threads touch those words), nor fall back to waiting on the CPU for the
    service's 40 ms kernels (parking still works in the new context), nor lose device time."""
    service = {"tenant": "service", "mode": "request", "kernel_us": 40000, "period_ms": 100}
    batch = {"tenant": "batch", "mode": "spin", "kernel_us": 100, "sync_every": 20}
    settle(lambda: reset_below(service, batch))


def parked_slow_launches_ok(parked, waited, lateness):
    """No launch waited for the higher tenant's kernel (on an idle box), or, where the box was
    seen to be late, at most a quarter as many as without parking."""
    if parked["max_launch_us"] < 15_000 + lateness["max_us"]:
        return True
    return parked["slow_launches"] <= waited["slow_launches"] // 4


def reset_below(service, batch):
    with Scenario(SERVICE_AND_BATCH) as world:
        _, reset = world.run([service, dict(batch, resets=2)], WINDOW_S)
        reset_lateness = world.lateness
        _, plain = valid(world.run([service, batch], WINDOW_S))
    assert reset["returncode"] == 0, reset
    valid([reset])
    print(f"batch below a busy service with 2 primary-context resets: longest launch call "
          f"{reset['max_launch_us']:.0f} us ({reset['slow_launches']} of 10 ms or more; without resets "
          f"{plain['slow_launches']}), device {100 * utilisation(reset):.0f}% "
          f"(without resets {100 * utilisation(plain):.0f}%); the resets took {reset['reset_ns'] / 1e6:.0f} ms; "
          f"box lateness {reset_lateness}")
    # Parking still works in the new context: no launch waits for the service's kernel, or, on a
    # box seen to be late, no more than parked launches wait without the resets (waiting on the
    # CPU, one launch would wait per service kernel: about 30).
    assert reset["max_launch_us"] < 15_000 + reset_lateness["max_us"] or \
        reset["slow_launches"] <= max(3, 2 * plain["slow_launches"]), (reset, plain, reset_lateness)
    # And it loses no device time beyond the resets themselves (the batch launches nothing
    # while it sets a context up again). Device time tells only where the box let both runs
    # have the CPU: held off it for more than a quarter of the window (schedstat), a batch's
    # device time follows the load, not the hook, and the launches above are what shows.
    held_off = max(reset["run_delay_ns"], plain["run_delay_ns"]) / (WINDOW_S * 1e9)
    launching = 1.0 - reset["reset_ns"] / (WINDOW_S * 1e9)
    if held_off <= 0.25:
        assert utilisation(reset) >= 0.9 * utilisation(plain) * launching, (reset, plain)
    else:
        print(f"device time not compared: the batch waited for a CPU {100 * held_off:.0f}% of the window")


def test_a_low_tenant_preempted_by_its_time_slices_is_not_held_back():
    """Below a higher-priority tenant, a process whose GPU channel groups all run at the short
    slice (the fake kernel driver confirms it) launches without the token: the GPU preempts its
    work within the slice, so nothing is held back for the service's 40 ms kernels. With the
    slices off (the control) the same batch is held back behind gates; beside a second
    low-priority tenant, which the token must still order it against, too; and with a limit,
    which the token keeps."""
    service = {"tenant": "service", "mode": "request", "kernel_us": 40000, "period_ms": 100}
    batch = {"tenant": "batch", "mode": "spin", "kernel_us": 100, "sync_every": 20, "channel_groups": True,
             "env": {"CUSLICE_LOG_LEVEL": "debug"}}
    with Scenario(SERVICE_AND_BATCH) as world:
        _, sliced = valid(world.run([service, batch], WINDOW_S))
    with Scenario(SERVICE_AND_BATCH.replace("{quantum: 20ms}", "{quantum: 20ms, lower_priority_timeslice: off}")) as world:
        _, off = valid(world.run([service, batch], WINDOW_S))
    with Scenario(SERVICE_AND_BATCH + "  - {name: other, allow_env: true, priority: low}\n") as world:
        _, beside_peer, _ = valid(world.run(
            [service, batch, {"tenant": "other", "mode": "spin", "kernel_us": 100, "sync_every": 20}], WINDOW_S))
    with Scenario(SERVICE_AND_BATCH.replace("{name: batch, allow_env: true, priority: low}",
                                            "{name: batch, allow_env: true, priority: low, compute: {limit: 90%}}")) as world:
        _, capped = valid(world.run([service, batch], WINDOW_S))
    counts = {name: exit_counts(r)
              for name, r in (("sliced", sliced), ("off", off), ("peer", beside_peer), ("capped", capped))}
    print(f"batch below a busy service: held back {counts}; device {100 * utilisation(sliced):.0f}% sliced, "
          f"{100 * utilisation(off):.0f}% with the slices off")
    assert "without the token: the GPU preempts them within the short slice (2 channel groups at 200 us)" in \
        sliced["stderr"], sliced["stderr"][-2000:]
    assert counts["sliced"]["launches held back"] == 0, counts
    assert counts["sliced"]["gates"] == 0, counts
    # The controls: the scenario does hold the batch back when the slices do not preempt it.
    assert counts["off"]["launches held back"] > 0, counts
    assert counts["peer"]["launches held back"] > 0, counts
    # Beside the peer it may have gone on without the token before the peer registered, never after.
    modes = re.findall(r"launches (go on without the token|wait for the token again)", beside_peer["stderr"])
    assert not modes or modes[-1] == "wait for the token again", beside_peer["stderr"][-2000:]
    assert counts["capped"]["launches held back"] > 0, counts
    assert "launches go on without the token" not in capped["stderr"], capped["stderr"][-2000:]


def test_a_call_that_waits_in_the_driver_for_held_work_does_not_hang():
    """A copy to pageable memory waits, inside the driver and holding its lock, for the work
    before it, which the hook may hold back behind a gate; the monitor, which alone opens
    gates, then blocks in the driver at its next record or query. On the H100 such a copy hung
    the process for good, 2 runs in 7. The watchdog opens the gates while the monitor is stuck.
    A batch below a busy service (so its work is held back often and long) ends each batch with
    such a copy: it must finish, and get device time."""
    service = {"tenant": "service", "mode": "request", "kernel_us": 40000, "period_ms": 100}
    batch = {"tenant": "batch", "mode": "spin", "kernel_us": 100, "sync_every": 20, "copy_back": True,
             "env": {"CUSLICE_LOG_LEVEL": "debug"}}
    with Scenario(SERVICE_AND_BATCH) as world:
        _, copied = valid(world.run([service, batch], WINDOW_S))
    unstuck = [line for line in copied["stderr"].splitlines() if "let all held back work run" in line]
    print(f"batch ending each batch with a pageable copy below a busy service: {copied['kernels']} kernels, "
          f"device {100 * utilisation(copied):.0f}%, the watchdog stepped in {len(unstuck)} times")
    assert utilisation(copied) >= 0.2, copied


def test_work_conserving_a_tenant_alone_takes_the_whole_device():
    config = """
scheduler: {quantum: 20ms}
tenants:
  - {name: small, allow_env: true, compute: {share: 30%}}
  - {name: absent, allow_env: true, compute: {share: 70%}}
"""
    with Scenario(config) as world:
        [report] = valid(world.run([dict(SPIN, tenant="small")], WINDOW_S))
        gated(world, ["small"])
    used = 100 * utilisation(report)
    print(f"work-conserving: share 30% alone used {used:.1f}% ({describe([report])})")
    assert used >= 90, describe([report])


def test_sigkill_of_the_token_holder_does_not_stall_the_other_tenant():
    # The spinner holds the token nearly all the time (the service needs 1 ms every 50 ms), so
    # when it is killed it holds the token, or is about to get it back.
    config = """
scheduler: {quantum: 20ms}
tenants:
  - {name: holder, allow_env: true, compute: {share: 50%}}
  - {name: survivor, allow_env: true, compute: {share: 50%}}
"""
    request = {"tenant": "survivor", "mode": "request", "kernel_us": 1000, "period_ms": 50}
    held_when_killed = []

    def kill_holder(processes, start, end):
        sleep_until_ns(start + 1000 * MS)
        # Kill it while the daemon's last word is that it holds the token (it does ~98% of the
        # time; wait out the survivor's 1 ms turns).
        deadline = now_ns() + 500 * MS
        last = world.daemon.token_holders()[-1:]
        while last != ["holder"] and now_ns() < deadline:
            time.sleep(0.0005)
            last = world.daemon.token_holders()[-1:]
        processes[0].send_signal(signal.SIGKILL)
        held_when_killed.extend(last)

    with Scenario(config) as world:
        holder, survivor = world.run([dict(SPIN, tenant="holder"), request], WINDOW_S,
                                     during=kill_holder)
        daemon_alive = world.daemon.alive()
        gated(world, ["holder", "survivor"])
    assert held_when_killed == ["holder"], "the spinner did not hold the token when killed"
    assert holder["returncode"] == -signal.SIGKILL, holder
    valid([survivor])
    print(f"sigkill: survivor max latency {survivor['max_us'] / 1000:.1f} ms, p99 "
          f"{survivor['p99_us'] / 1000:.1f} ms, {survivor['requests']} requests")
    assert daemon_alive
    assert survivor["max_us"] <= 1_000_000, survivor
    # It kept being served after the kill: about one request per period over the window.
    assert survivor["requests"] >= 0.8 * WINDOW_S * 1000 / 50, survivor


def test_without_a_daemon_workers_run_ungated():
    with Scenario(config_yaml=None) as world:
        reports = valid(world.run([dict(SPIN, tenant="a"), dict(SPIN, tenant="b")], WINDOW_S))
    used = [100 * utilisation(r) for r in reports]
    print(f"no daemon: {used[0]:.1f}% + {used[1]:.1f}% ({describe(reports)})")
    # Nothing gates them: the device is full, and each runs as soon as the device is free, so
    # the FIFO device splits it about evenly.
    assert sum(used) >= 90, describe(reports)
    for u in used:
        assert u >= 30, describe(reports)
    assert statistics.pstdev(used) < 15
