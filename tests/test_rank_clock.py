"""Ranks of another machine on the timeline's clock: ping round trips (``core/model/rank_clock``,
``core/run/rank_links``) and the runner's prompt answer (``runner/link``)."""

from __future__ import annotations

import queue
import random
import sys
import threading
import time
from multiprocessing.connection import Client
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from waiting import wait_until

from gpuwatch import protocol
from gpuwatch.core.model.messages import RankInfo
from gpuwatch.core.model.rank_clock import (
    GROUP,
    Pong,
    best_of_groups,
    offsets_at,
    shift_to_rank0,
    usable_groups,
    worst_error_ns,
)
from gpuwatch.core.run.link import LinkListener, new_authkey, private_dir, remove_private_dir
from gpuwatch.core.run.rank_links import (
    PING_BURST,
    PING_EVERY_S,
    PING_QUICK_NS,
    RankRun,
    RankRuns,
    placed_steps,
)
from gpuwatch.core.run.run_model import RunModel
from gpuwatch.runner.link import Link as RunnerLink
from gpuwatch.runner.link import parse_address

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="AF_UNIX listener")

#: The other machine's clock runs this far ahead of ours.
AHEAD_NS = 3_217_000_000


def _pong(t_ns: int, out_ns: int, back_ns: int, offset_ns: int) -> Pong:
    """A round trip sent at ``t_ns``: ``out_ns`` to reach the rank, ``back_ns`` back."""
    return Pong(t_ns, t_ns + out_ns + back_ns, t_ns + out_ns + offset_ns)


def test_the_shortest_round_trip_of_each_group_gives_the_offset() -> None:
    rng = random.Random(7)
    pongs = [
        _pong(i * 10**8, rng.randint(50_000, 5_000_000), rng.randint(50_000, 5_000_000), AHEAD_NS)
        for i in range(3 * GROUP)
    ]
    pongs[3] = _pong(pongs[3].t_ns, 20_000, 20_000, AHEAD_NS)  # one quiet round trip
    best = best_of_groups(pongs)
    assert len(best) == 3 and best[0] == pongs[3]
    assert abs(best[0].offset_ns - AHEAD_NS) <= 0
    for pong in best:
        assert abs(pong.offset_ns - AHEAD_NS) <= pong.rtt_ns // 2


def test_a_drifting_clock_is_followed_between_groups() -> None:
    """50 µs of drift over 10 s: a step between the groups gets the offset in between."""
    early = [_pong(i * 1000, 10_000, 10_000, AHEAD_NS) for i in range(GROUP)]
    late = [_pong(10**10 + i * 1000, 10_000, 10_000, AHEAD_NS + 50_000) for i in range(GROUP)]
    times = np.array([0, 5 * 10**9, 10**10, 2 * 10**10]) + AHEAD_NS
    got = offsets_at(early + late, times)
    assert got is not None
    assert list(got) == pytest.approx(
        [AHEAD_NS, AHEAD_NS + 25_000, AHEAD_NS + 50_000, AHEAD_NS + 50_000], abs=10
    )


def test_shifts_are_relative_to_rank_0s_clock() -> None:
    times = np.array([AHEAD_NS, AHEAD_NS + 10**9])
    ahead = [_pong(0, 1000, 1000, AHEAD_NS)]
    assert list(shift_to_rank0(times, None, None)) == [0, 0]
    assert list(shift_to_rank0(times, ahead, None)) == [AHEAD_NS] * 2
    assert list(shift_to_rank0(times, None, ahead)) == [-AHEAD_NS] * 2
    assert list(shift_to_rank0(times, ahead, ahead)) == [0, 0]
    assert shift_to_rank0(times, [], None) is None  # not answered yet: cannot be placed


def _hello(rank: int, node: str) -> dict[str, Any]:
    return {
        "protocol": protocol.PROTOCOL_VERSION,
        "pid": 1,
        "workload": "train.py",
        "device": {},
        "versions": {},
        "knobs": [],
        "config": {},
        "role": protocol.ROLE_RANK,
        "rank": {"rank": rank, "local_rank": 0, "world_size": 2, "node": node},
    }


def _steps(first_ns: int, n: int = 5, step_ns: int = 10_000_000) -> dict[str, Any]:
    host = [
        [first_ns + i * step_ns + m * 1_000_000 for m in range(protocol.N_MARKS)] for i in range(n)
    ]
    return {"step": list(range(n)), "config": [0] * n, "samples": [8] * n, "host": host}


class _OtherMachine:
    """A rank whose clock runs ``AHEAD_NS`` ahead of ours: it answers pings as the runner's
    link does, from its own reader, stamped with its clock."""

    def __init__(self, address: object, key: bytes, late_answers: int = 0) -> None:
        self.conn = Client(parse_address(str(address)), authkey=key)
        self.late_answers = late_answers  # its first answers wait (it is busy importing)
        self.lock = threading.Lock()
        self.reader = threading.Thread(target=self._answer, daemon=True)
        self.reader.start()

    def clock(self) -> int:
        return time.perf_counter_ns() + AHEAD_NS

    def send(self, kind: str, **fields: Any) -> None:
        with self.lock:
            self.conn.send_bytes(protocol.encode(kind, **fields))

    def _answer(self) -> None:
        while True:
            try:
                message = protocol.decode(self.conn.recv_bytes(), allowed=protocol.GUI_KINDS)
            except (EOFError, OSError):
                return
            if message["kind"] == "ping":
                if self.late_answers:
                    self.late_answers -= 1
                    time.sleep(2 * PING_QUICK_NS / 1e9)
                self.send("pong", t=message["t"], clock_ns=self.clock())


def test_a_rank_of_another_machine_is_drawn_on_rank_0s_clock() -> None:
    folder = private_dir()
    key = new_authkey()
    local = LinkListener(folder, key, many=True, handshake_timeout_s=5.0)
    tcp = LinkListener(Path(), key, many=True, tcp=("127.0.0.1", 0), handshake_timeout_s=5.0)
    threads: list[threading.Thread] = []
    heard: queue.Queue[tuple[int, str]] = queue.Queue()

    def spawn(name: str, target: Any) -> threading.Thread:
        thread = threading.Thread(target=target, name=name, daemon=True)
        thread.start()
        threads.append(thread)
        return thread

    runs = RankRuns(local, primary=lambda m: None, log_line=lambda *a: None, spawn_thread=spawn)
    runs.add_listener(lambda info, message, t_ns: heard.put((info.rank, message["kind"])))
    runs.start(tcp)
    rank0 = RunnerLink.connect(local.address, key)  # the runner's own link, on this machine
    other = _OtherMachine(tcp.address, key)
    try:
        now = time.perf_counter_ns()
        rank0.send("hello", **_hello(0, "here"))
        rank0.send_batch("steps", **_steps(now))
        other.send("hello", **_hello(1, "there"))
        other.send("steps", **_steps(now + AHEAD_NS + 2_000_000))  # 2 ms after rank 0's

        def clocked() -> bool:
            got = runs.get(1)
            return got is not None and len(got.pongs) >= PING_BURST and runs.get(0) is not None

        wait_until(clocked, timeout=30, what="the other machine's pongs")
        wait_until(
            lambda: all(r.model.steps.count == 5 for r in runs.runs()), timeout=30, what="steps"
        )

        placed = {r.info.rank: r.steps for r in placed_steps(runs.runs(), now - 10**9)}
        assert not runs.get(0).pongs  # never pinged: this machine
        worst = max(p.rtt_ns for p in best_of_groups(list(runs.get(1).pongs)))
        moved = placed[1].host[:, 0] - placed[0].host[:, 0]
        assert np.all(np.abs(moved - 2_000_000) <= worst // 2 + 1), (moved, worst)
        assert list(placed[0].host[:, 0]) == [now + i * 10_000_000 for i in range(5)]
        assert (1, "pong") in list(heard.queue)  # the recording keeps the round trips
    finally:
        runs.close()
        rank0.close()
        other.conn.close()
        local.close()
        tcp.close()
        remove_private_dir(folder)


def test_a_group_that_waited_on_a_busy_rank_is_left_out_while_a_better_one_exists() -> None:
    """A rank importing torch on a loaded machine answers a whole burst late, each pong's offset
    off by up to half its round trip; a later group of prompt answers places every step."""
    late = [_pong(i * 50_000_000, 160_000_000, 1_000_000, AHEAD_NS) for i in range(GROUP)]
    prompt = [_pong(10**9 + i * 50_000_000, 100_000, 100_000, AHEAD_NS) for i in range(GROUP)]
    times = np.array([AHEAD_NS, AHEAD_NS + 5 * 10**8, AHEAD_NS + 2 * 10**9], dtype=np.int64)
    alone = offsets_at(late, times)
    assert alone is not None and np.all(np.abs(alone - AHEAD_NS) > 50_000_000), "only it: used"
    assert worst_error_ns(late) == 161_000_000 // 2
    placed = offsets_at(late + prompt, times)
    assert placed is not None and np.all(np.abs(placed - AHEAD_NS) <= 100_000), placed
    assert worst_error_ns(late + prompt) == 100_000
    assert usable_groups(late + prompt) == best_of_groups(prompt)


def test_the_first_burst_goes_on_until_a_round_trip_is_quick() -> None:
    """The first ``PING_BURST`` answers come late (the rank is busy): the window keeps pinging
    at the burst's pace until one comes back quickly, then at the steady pace."""
    folder = private_dir()
    key = new_authkey()
    local = LinkListener(folder, key, many=True, handshake_timeout_s=5.0)
    tcp = LinkListener(Path(), key, many=True, tcp=("127.0.0.1", 0), handshake_timeout_s=5.0)

    def spawn(name: str, target: Any) -> threading.Thread:
        thread = threading.Thread(target=target, name=name, daemon=True)
        thread.start()
        return thread

    runs = RankRuns(local, primary=lambda m: None, log_line=lambda *a: None, spawn_thread=spawn)
    runs.start(tcp)
    other = _OtherMachine(tcp.address, key, late_answers=PING_BURST)
    try:
        other.send("hello", **_hello(1, "there"))

        def pongs() -> list[Pong]:
            got = runs.get(1)
            return list(got.pongs) if got is not None else []

        wait_until(lambda: len(pongs()) >= PING_BURST + 2, timeout=30, what="pongs")
        answered = pongs()
        assert all(p.rtt_ns > PING_QUICK_NS for p in answered[:PING_BURST])
        # none of the first answers was quick, so the next ping went at the burst's pace, not
        # the steady one's
        assert answered[PING_BURST].t_ns - answered[PING_BURST - 1].t_ns < PING_EVERY_S * 1e9 / 2
    finally:
        runs.close()
        other.conn.close()
        local.close()
        tcp.close()
        remove_private_dir(folder)


def test_a_rank_whose_clock_is_unknown_is_left_out_until_it_answers() -> None:
    model = RunModel()
    model.fold({"kind": "steps", **_steps(AHEAD_NS)})
    silent = RankRun(RankInfo(1, 0, 2, node="there"), model, pid=None, remote=True)
    assert placed_steps([silent], 0) == []
    silent.pongs.append(_pong(0, 1000, 1000, AHEAD_NS))
    [placed] = placed_steps([silent], 0)
    assert placed.steps.host[0, 0] == 0


def test_the_runners_link_answers_a_ping_from_its_reader_with_its_clock() -> None:
    folder = private_dir()
    key = new_authkey()
    listener = LinkListener(folder, key)
    got: list[Any] = []
    accept = threading.Thread(target=lambda: got.append(listener.accept()), daemon=True)
    accept.start()
    runner = RunnerLink.connect(listener.address, key)
    try:
        accept.join(10)
        conn = got[0]
        sent = time.perf_counter_ns()
        conn.send_bytes(protocol.encode("ping", t=sent))
        answer = protocol.decode(conn.recv_bytes(), allowed=protocol.RUNNER_KINDS)
        back = time.perf_counter_ns()
        assert answer["kind"] == "pong" and answer["t"] == sent
        assert sent <= answer["clock_ns"] <= back  # one machine, one clock
        assert runner.controls.empty()  # a ping is not a control for the loop
    finally:
        runner.close()
        listener.close()
        remove_private_dir(folder)


def test_rank_0s_steps_are_kept_once_in_the_store_the_session_fills() -> None:
    folder = private_dir()
    key = new_authkey()
    local = LinkListener(folder, key, many=True, handshake_timeout_s=5.0)
    session = RunModel()  # what the Session's model does with rank 0's messages

    def spawn(name: str, target: Any) -> threading.Thread:
        thread = threading.Thread(target=target, name=name, daemon=True)
        thread.start()
        return thread

    runs = RankRuns(
        local,
        primary=session.fold,
        log_line=lambda *a: None,
        spawn_thread=spawn,
        primary_steps=session.steps,
    )
    runs.start()
    rank0 = RunnerLink.connect(local.address, key)
    try:
        rank0.send("hello", **_hello(0, "here"))
        rank0.send_batch("steps", **_steps(time.perf_counter_ns()))
        wait_until(lambda: session.steps.count == 5, timeout=30, what="rank 0's steps")
        run = runs.get(0)
        assert run is not None and run.model.steps is session.steps
        rank0.send_batch("steps", **{**_steps(time.perf_counter_ns()), "step": list(range(5, 10))})
        wait_until(lambda: session.steps.count == 10, timeout=30, what="more steps")
        assert len(run.model.steps.snapshot()) == 10  # once each, not twice
    finally:
        runs.close()
        rank0.close()
        local.close()
        remove_private_dir(folder)
