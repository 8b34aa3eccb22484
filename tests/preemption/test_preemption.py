"""Memory preemption end to end, on one simulated 16 GiB card: a preemptible low-priority
trainer holds most of it; a high-priority service's allocation that does not fit makes the
scheduler suspend the trainer (the fake driver's checkpoint API), the service gets its memory,
and the trainer is resumed once the memory is free again. Then the races: an allocation during
a suspension, a resume meeting a new allocation, a suspended process killed, a scheduler
restarted with a tenant suspended; and the refusals and failures an operator must see."""
import os
import re
import signal
import time

import pytest

from preemption_harness import CHECKPOINTED, GiB, MiB, RUNNING, Scenario, wait_for

CONFIG = """scheduler:
  gpu_memory: 16GiB
  preemption:
    allocation_wait: 30s
    resume_holdoff: 200ms
    host_reserve: 1GiB
    resume_margin: 256MiB
tenants:
  - name: serve
    priority: high
    memory: 12GiB
  - name: train
    priority: low
    memory: 15GiB
    preemptible: true
"""


def suspended_by_log(daemon, tenant):
    return f"tenant {tenant} suspended" in daemon.log_text()


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
        assert "tenant train resumed" in s.daemon.log_text()
        train.ok("free")
