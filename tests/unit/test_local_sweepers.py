"""The local stack's sweepers: how many it runs (`SCHEDULER_LOCAL_SWEEPERS`), their names and slots, their ticks
spread over the sweep interval, and a killed one restarted in its own slot."""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import scheduler_local.__main__ as local_stack
from scheduler_local.__main__ import Child, Supervisor, local_sweepers, sweeper_children, wait_healthy
from scheduler_local.sweeper_loop import next_tick


def test_one_sweeper_unless_told_and_a_bad_count_is_refused() -> None:
    assert local_sweepers({}) == 1
    assert local_sweepers({"SCHEDULER_LOCAL_SWEEPERS": ""}) == 1
    assert local_sweepers({"SCHEDULER_LOCAL_SWEEPERS": "3"}) == 3
    for bad in ("0", "-1", "two", "1.5"):
        with pytest.raises(ValueError, match="SCHEDULER_LOCAL_SWEEPERS"):
            local_sweepers({"SCHEDULER_LOCAL_SWEEPERS": bad})


def test_sweepers_are_named_like_the_api_processes_and_each_knows_its_slot(tmp_path: Path) -> None:
    children = sweeper_children(3, tmp_path)

    assert [c.name for c in children] == ["sweeper", "sweeper-2", "sweeper-3"]
    assert [c.log.name for c in children] == ["sweeper.log", "sweeper-2.log", "sweeper-3.log"]
    assert {c.module for c in children} == {"scheduler_local.sweeper_loop"}
    assert [c.env for c in children] == [
        {"SCHEDULER_LOCAL_SWEEPERS": "3", "SCHEDULER_LOCAL_SWEEPER_SLOT": str(slot)} for slot in range(3)
    ]
    # one sweeper keeps the name the logs, the operator's view and the chaos test know
    assert [c.name for c in sweeper_children(1, tmp_path)] == ["sweeper"]


def test_the_ticks_of_k_sweepers_are_spread_evenly_over_the_interval() -> None:
    # Given three sweepers sweeping every 3 s, all asking at the same instant (started together)
    now = 1_000.2
    ticks = sorted(next_tick(now, 3.0, slot, 3) for slot in range(3))

    # Then they sweep one second apart, each at its own place in the period, not in lockstep
    assert ticks == pytest.approx([1_001.0, 1_002.0, 1_003.0])
    assert [t % 3.0 for t in (next_tick(now, 3.0, slot, 3) for slot in range(3))] == pytest.approx([0.0, 1.0, 2.0])


def test_a_sweeper_keeps_its_slot_whenever_it_asks_and_skips_the_ticks_a_long_sweep_overran() -> None:
    # A restarted sweeper (any instant) falls back into its slot: slot 1 of 2 at 1 s intervals ticks at .5
    for now in (10.0, 10.2, 10.5, 10.7, 10.99):
        tick = next_tick(now, 1.0, 1, 2)
        assert now <= tick < now + 1.0 and tick % 1.0 == pytest.approx(0.5)
    # A sweep that ran 2.3 s from its tick at 20.5 sweeps next at 23.5, not at once to catch up
    assert next_tick(22.8, 1.0, 1, 2) == pytest.approx(23.5)
    # One sweeper ticks on the interval
    assert next_tick(7.3, 2.0, 0, 1) == pytest.approx(8.0)


def probes(tmp_path: Path) -> dict[str, str]:
    """Stand-ins for the stack's processes, and the environment that finds them: `slot_probe` writes its sweeper slot
    to `started-<pid>` and stays up; `failing_probe` exits by itself, with code 3."""
    (tmp_path / "slot_probe.py").write_text(
        "import os, pathlib, sys, time\n"
        'out = pathlib.Path(sys.argv[0]).parent / f"started-{os.getpid()}"\n'
        "out.write_text(os.environ['SCHEDULER_LOCAL_SWEEPER_SLOT'])\n"
        "time.sleep(60)\n"
    )
    (tmp_path / "failing_probe.py").write_text("import sys\nsys.exit(3)\n")
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), *sys.path])}


def test_a_killed_sweeper_is_restarted_in_its_own_slot(tmp_path: Path) -> None:
    # Given a supervisor running two "sweepers" that write their slot and stay up
    env = probes(tmp_path)
    children = sweeper_children(2, tmp_path)
    for child in children:
        child.module = "slot_probe"
    supervisor = Supervisor(tmp_path, env, children)
    try:
        for child in children:
            supervisor.spawn(child)
        victim = children[1]
        assert victim.proc is not None
        first = victim.proc.pid

        # When the second one is SIGKILLed
        os.kill(first, signal.SIGKILL)
        victim.proc.wait(timeout=10)
        supervisor.watch()

        # Then it is started again, under its name, in its own slot
        assert victim.restarts == 1 and victim.proc.pid != first
        assert int((tmp_path / "pids" / "sweeper-2.pid").read_text()) == victim.proc.pid
        restarted = tmp_path / f"started-{victim.proc.pid}"
        deadline = time.time() + 20
        while not restarted.exists() and time.time() < deadline:
            time.sleep(0.05)
        assert restarted.read_text() == "1"
        assert children[0].restarts == 0
    finally:
        supervisor.stop()


class Health:
    """`urlopen` for `wait_healthy`: the API answers 200 once `ready()` says so, and is refused until then."""

    def __init__(self, ready: Any) -> None:
        self.ready = ready
        self.asked = 0

    @contextlib.contextmanager
    def __call__(self, url: str, timeout: float) -> Iterator[Any]:
        self.asked += 1
        if not self.ready():
            raise OSError("connection refused")
        yield type("Response", (), {"status": 200})()


def test_a_sweeper_killed_while_the_stack_starts_is_restarted_and_the_start_goes_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a starting stack whose sweepers are up and whose API does not answer yet
    env = probes(tmp_path)
    children = sweeper_children(2, tmp_path)
    for child in children:
        child.module = "slot_probe"
    supervisor = Supervisor(tmp_path, env, children)
    victim = children[1]
    health = Health(lambda: victim.restarts > 0)
    monkeypatch.setattr(local_stack.urllib.request, "urlopen", health)
    try:
        for child in children:
            supervisor.spawn(child)
        assert victim.proc is not None

        # When one of them is SIGKILLed before the API answers
        os.kill(victim.proc.pid, signal.SIGKILL)
        victim.proc.wait(timeout=10)

        # Then the start goes on: it is restarted, and the stack is up once the API answers
        assert wait_healthy("http://127.0.0.1:1/v1/health", supervisor, timeout=20)
        assert victim.restarts == 1 and victim.proc.poll() is None
    finally:
        supervisor.stop()


def test_a_process_that_exits_by_itself_while_the_stack_starts_stops_the_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given a starting stack one of whose processes exits by itself (a bad setting, a port taken)
    env = probes(tmp_path)
    broken = Child("sweeper", "failing_probe", tmp_path / "sweeper.log")
    supervisor = Supervisor(tmp_path, env, [broken])
    monkeypatch.setattr(local_stack.urllib.request, "urlopen", Health(lambda: False))
    try:
        supervisor.spawn(broken)
        assert broken.proc is not None
        broken.proc.wait(timeout=10)

        # Then the start stops at once and says which one and where its log is, rather than restarting it forever
        assert not wait_healthy("http://127.0.0.1:1/v1/health", supervisor, timeout=20)
        assert broken.restarts == 0
        assert f"sweeper exited during start-up (code 3); see {broken.log}" in capsys.readouterr().out
    finally:
        supervisor.stop()
