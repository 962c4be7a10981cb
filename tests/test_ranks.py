"""The pieces of a run of many ranks, without starting one: how a rank's command is built, who
a rank is, how torchrun's failures are read, the listener that takes many peers, a stop for a
step count, and the straggler rules."""

from __future__ import annotations

import dataclasses
import queue
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from multiprocessing import AuthenticationError
from multiprocessing.connection import Client
from typing import get_args

import numpy as np
import pytest
from waiting import wait_until

from gpuwatch import protocol
from gpuwatch.cli import torchrun_args
from gpuwatch.core.figures.advisor import advise, context_of
from gpuwatch.core.figures.rank_figures import (
    RULE_QUANTITY,
    RankFigures,
    Straggler,
    StragglerRule,
    find_straggler,
    rank_line,
    with_ranks,
)
from gpuwatch.core.figures.segments import SegmentStats
from gpuwatch.core.model.messages import CollectiveSample, Hello, RankInfo
from gpuwatch.core.model.store import StepsView
from gpuwatch.core.run.link import LinkListener, new_authkey, private_dir, remove_private_dir
from gpuwatch.core.run.session import LaunchSpec
from gpuwatch.core.run.torchrun_args import TORCHRUN_FLAGS
from gpuwatch.runner import script_control
from gpuwatch.runner.probe_knobs import ProbeKnobs
from gpuwatch.runner.ranks import RankIdentity, RankLaunchError, RankLink, rank_command
from gpuwatch.runner.script_control import ScriptControl
from gpuwatch.runner.torchrun_launcher import rank_failures

LINK = RankLink(root="/src", address="/tmp/x/link.sock", keyfile="/tmp/x/ranks.key", options=())


def test_a_rank_runs_torchruns_script_through_the_boot_with_its_arguments_intact() -> None:
    cmd = rank_command(["-u", "train.py", "--lr", "0.1", "--local-rank=3"], LINK)
    assert cmd[:3] == ["-u", "-c", protocol.boot_code("/src")]
    assert cmd[cmd.index("--script") + 1] == "train.py"
    assert cmd[cmd.index("--") + 1 :] == ["--lr", "0.1", "--local-rank=3"]
    assert protocol.AS_RANK_FLAG in cmd[: cmd.index("--")]
    assert cmd[cmd.index(protocol.AUTHKEY_FILE_FLAG) + 1] == "/tmp/x/ranks.key"


def test_a_module_rank_runs_as_python_m_would() -> None:
    cmd = rank_command(["-u", "-m", "pkg.train", "a"], LINK)
    assert cmd[cmd.index("--module") + 1] == "pkg.train"
    assert "--script" not in cmd
    assert cmd[cmd.index("--") + 1 :] == ["a"]


@pytest.mark.parametrize("args", [[], ["train.py"], ["-u"], ["-u", "-m"]])
def test_a_rank_command_gpuwatch_cannot_watch_is_one_sentence(args: list[str]) -> None:
    with pytest.raises(RankLaunchError):
        rank_command(args, LINK)


def test_rank_identity_comes_from_torchruns_environment() -> None:
    env = {"RANK": "3", "LOCAL_RANK": "1", "WORLD_SIZE": "4", "GROUP_RANK": "1"}
    me = RankIdentity.from_environ(env)
    assert (me.rank, me.local_rank, me.world_size, me.node_rank) == (3, 1, 4, 1)
    assert me.node
    info = RankInfo.from_message(me.fields())
    assert info == RankInfo(3, 1, 4, 1, me.node)
    with pytest.raises(ValueError, match="LOCAL_RANK"):
        RankIdentity.from_environ({"RANK": "0", "WORLD_SIZE": "2"})


def test_hello_reads_the_rank_and_refuses_a_rank_outside_the_world() -> None:
    base = {"protocol": 1, "pid": 1, "workload": "t.py", "device": {}, "versions": {}}
    hello = Hello.from_message(
        {**base, "role": "rank", "rank": {"rank": 1, "local_rank": 1, "world_size": 2}}
    )
    assert hello.role == "rank" and hello.rank == RankInfo(1, 1, 2)
    assert (
        Hello.from_message({**base, "rank": {"rank": 2, "local_rank": 0, "world_size": 2}}).rank
        is None
    )
    assert Hello.from_message(base).rank is None


@dataclass
class _Failure:
    """What torchrun's ``ProcessFailure`` offers."""

    local_rank: int
    pid: int
    exitcode: int
    timestamp: int
    name: str

    def signal_name(self) -> str:
        return self.name


class _ChildFailed(Exception):
    def __init__(self, failures: dict[int, _Failure]) -> None:
        super().__init__("child failed")
        self.failures = failures


def test_the_rank_that_failed_first_is_not_one_torchrun_ended() -> None:
    """torchrun SIGTERMs the others once one failed, and reports them too, often in the same
    second: the killed rank must come first even with a higher rank number."""
    exc = _ChildFailed(
        {
            0: _Failure(0, 10, -15, 100, "SIGTERM"),
            1: _Failure(1, 11, -9, 100, "SIGKILL"),
            2: _Failure(0, 12, 1, 100, "<N/A>"),
        }
    )
    failures = rank_failures(exc)
    assert [f.rank for f in failures] == [1, 2, 0]
    assert failures[0].sentence() == "rank 1 was killed by SIGKILL"
    assert failures[1].sentence() == "rank 2 exited with code 1"
    assert rank_failures(RuntimeError("no failures here")) == []


def test_the_listener_for_ranks_hands_out_every_authenticated_peer() -> None:
    folder = private_dir()
    key = new_authkey()
    listener = LinkListener(folder, key, many=True, handshake_timeout_s=5.0)
    got: queue.Queue[object] = queue.Queue()

    def accept() -> None:
        while (conn := listener.accept()) is not None:
            got.put(conn)

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        peers = [Client(listener.address, authkey=key) for _ in range(3)]
        accepted = [got.get(timeout=10) for _ in range(3)]
        assert len(accepted) == 3
        with pytest.raises((AuthenticationError, EOFError, OSError)):  # refused; it goes on
            Client(listener.address, authkey=b"wrong key")
        peers.append(Client(listener.address, authkey=key))
        accepted.append(got.get(timeout=10))
    finally:
        listener.close()
        thread.join(10)
        remove_private_dir(folder)
    assert not thread.is_alive()
    for conn in [*peers, *accepted]:
        conn.close()  # type: ignore[attr-defined]


class _Link:
    def __init__(self) -> None:
        self.controls: queue.Queue[dict[str, object]] = queue.Queue()
        self.lost = threading.Event()
        self.sent: list[tuple[str, dict[str, object]]] = []

    def send(self, kind: str, **fields: object) -> None:
        self.sent.append((kind, fields))

    def log(self, level: str, text: str) -> None:
        self.sent.append(("log", {"level": level, "text": text}))


def test_a_stop_for_a_step_count_stops_at_that_boundary_and_not_before() -> None:
    link = _Link()
    control = ScriptControl(link, ProbeKnobs(link), stop_grace_s=60.0)  # type: ignore[arg-type]
    control.start()
    try:
        link.controls.put({"kind": "stop", "grace_s": 60.0, "at_step": 7})
        for _ in range(100):  # the watcher thread takes the message
            if control.stop_at is not None:
                break
            threading.Event().wait(0.05)
        assert control.stop_at == 7
        for step in range(1, 7):
            control.at_boundary(step)  # no stop before step 7
        with pytest.raises(KeyboardInterrupt):
            control.at_boundary(7)
        assert control.stop_reason == "stopped"
    finally:
        control.script_done()


def _stop_taken(control: ScriptControl, link: _Link, at_step: int, grace_s: float) -> None:
    link.controls.put({"kind": "stop", "grace_s": grace_s, "at_step": at_step})
    for _ in range(200):  # the watcher thread takes the message
        if control.stop_at is not None:
            return
        threading.Event().wait(0.05)
    raise AssertionError("the stop never reached the control")


@pytest.fixture
def stopping(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[ScriptControl, _Link, list[str]]]:
    """A started control told to stop after step 8 with a grace of 0.3 s; its interrupts are
    counted instead of sent."""
    interrupts: list[str] = []
    monkeypatch.setattr(script_control, "interrupt_main_thread", lambda: interrupts.append("!"))
    link = _Link()
    control = ScriptControl(link, ProbeKnobs(link), stop_grace_s=0.3)  # type: ignore[arg-type]
    control.start()
    try:
        _stop_taken(control, link, at_step=8, grace_s=0.3)
        yield control, link, interrupts
    finally:
        control.script_done()


def test_a_slow_way_to_the_stop_step_is_not_interrupted_while_steps_come(stopping) -> None:
    """A loaded machine slows the ranks on their way to the stop's step beyond its grace: as
    long as boundaries come, no rank is interrupted, so every rank stops after that step
    (a timer from the message would interrupt one a step before the others stop)."""
    control, _, interrupts = stopping
    for step in range(1, 8):  # 7 steps of 0.15 s: far beyond the grace, none stalled
        threading.Event().wait(0.15)
        control.at_boundary(step)
    with pytest.raises(KeyboardInterrupt):
        control.at_boundary(8)
    assert interrupts == [] and not control.interrupted


def test_a_rank_stalled_on_its_way_to_the_stop_step_is_interrupted(stopping) -> None:
    """A rank that reaches no boundary for the grace (a peer gone mid all-reduce) still ends."""
    control, link, interrupts = stopping
    control.at_boundary(1)
    wait_until(lambda: interrupts, 30, "the stalled rank's interrupt")
    assert control.interrupted and control.stop_reason == "stopped"
    notes = [f["text"] for kind, f in link.sent if kind == "log"]
    wanted = "no step boundary for 0.3 s on its way to the stop after step 8"
    assert any(wanted in note for note in notes), notes


def test_a_change_for_a_later_step_waits_for_that_boundary() -> None:
    """Every rank applies a ``set`` with ``at_step`` at that step, whenever it arrived."""
    from gpuwatch import probe as gw

    link = _Link()
    knobs = ProbeKnobs(link)  # type: ignore[arg-type]
    knobs.declare(gw.knob_entry("workers", 0, choices=[0, 2]))
    control = ScriptControl(link, knobs, stop_grace_s=60.0)  # type: ignore[arg-type]
    control._inbox.put({"kind": "set", "values": {"workers": 2}, "request": 1, "at_step": 5})
    for step in range(1, 5):
        control.at_boundary(step)
        assert knobs.values["workers"] == 0, step
    control.at_boundary(5)
    assert knobs.values["workers"] == 2
    configs = [fields for kind, fields in link.sent if kind == "config"]
    assert [c["first_step"] for c in configs] == [5]


def _view(phases_ms: list[float], n: int = 20, gap_ms: float = 0.0) -> StepsView:
    """``n`` identical steps whose phases (``protocol.PHASES`` order) take ``phases_ms``, each
    ``gap_ms`` after the one before (the loop's own code: ``other``)."""
    widths = np.array(phases_ms, dtype=np.float64) * 1e6
    marks = np.concatenate([[0.0], np.cumsum(widths)])
    step_ns = marks[-1] + gap_ms * 1e6
    host = np.array([marks + i * step_ns for i in range(n)], dtype=np.int64)
    empty = np.zeros((n, len(protocol.MARKS)), np.int64)
    return StepsView(
        np.arange(n), np.zeros(n, np.int64), np.full(n, 8), host, empty, np.zeros(n, bool)
    )


def _ranks(*phases: list[float]) -> list[RankFigures]:
    return [RankFigures.of(i, i, "node", _view(p)) for i, p in enumerate(phases)]


#: data, h2d, forward, backward, optimizer, sync
EVEN = [1.0, 0.0, 2.0, 5.0, 1.0, 0.0]


def test_a_rank_with_a_slow_loader_is_named_with_the_others_waiting_in_backward() -> None:
    slow = [30.0, 0.0, 2.0, 2.0, 1.0, 0.0]
    waiting = [1.0, 0.0, 2.0, 31.0, 1.0, 0.0]
    found = find_straggler(_ranks(waiting, waiting, slow, waiting))
    assert found is not None and found.rank == 2 and found.rule == "input"
    assert "input wait is 86 %" in found.sentence
    assert "backward (p50 31.0 ms against its 2.0 ms" in found.sentence


def test_a_rank_that_computes_slower_is_named() -> None:
    slow = [1.0, 0.0, 6.0, 5.0, 1.0, 0.0]
    found = find_straggler(_ranks(EVEN, slow, EVEN))
    assert found is not None and (found.rank, found.rule) == (1, "compute")
    assert "forward takes 6.0 ms, the others' 2.0 ms (200 % longer)" in found.sentence


def test_a_rank_that_arrives_last_at_the_all_reduce_is_named_with_where_its_time_goes() -> None:
    """The straggler's extra time is its own code between steps (no phase of ours): the others'
    long backward still gives it away."""
    waiting = [0.5, 0.0, 0.5, 11.0, 0.5, 0.0]
    late = [0.5, 0.0, 0.5, 1.0, 0.5, 0.0]
    figures = [
        RankFigures.of(0, 0, "n", _view(waiting)),
        RankFigures.of(1, 1, "n", _view(late, gap_ms=10.0)),
    ]
    assert figures[1].phase_ms_p50["other"] == pytest.approx(10.0)
    found = find_straggler(figures)
    assert found is not None and (found.rank, found.rule) == (1, "allreduce")
    assert "others wait for it in backward (p50 11.0 ms against its 1.0 ms)" in found.sentence
    assert "its extra time is in its own code between steps (10.0 ms" in found.sentence


def _samples(comm_ms: float, n: int = 5) -> list[CollectiveSample]:
    return [CollectiveSample(t_ns=i, iteration=i + 1, comm_ns=int(comm_ms * 1e6)) for i in range(n)]


def test_ddps_own_all_reduce_time_names_the_rank_that_arrives_last() -> None:
    """With DDP's samples on every rank, the shortest all-reduce is the last to arrive, even
    where backward times alone say nothing (here every backward is the same)."""
    even = [0.5, 0.0, 0.5, 11.0, 0.5, 0.0]
    figures = [
        RankFigures.of(0, 0, "n", _view(even), collective=_samples(10.5)),
        RankFigures.of(1, 1, "n", _view(even), collective=_samples(0.8)),
        RankFigures.of(2, 2, "n", _view(even), collective=_samples(10.2)),
    ]
    assert figures[1].allreduce_ms_p50 == pytest.approx(0.8)
    assert figures[1].allreduce_samples == 5
    assert find_straggler([RankFigures.of(i, i, "n", _view(even)) for i in range(3)]) is None

    found = find_straggler(figures)
    assert found is not None and (found.rank, found.rule) == (1, "allreduce")
    assert (
        "the others wait for it in the all-reduce (DDP's own timing: p50 10.3 ms against its "
        "0.8 ms)" in found.sentence
    )
    assert "all-reduce p50: 0.8 ms (DDP's timing, 5 samples)" in rank_line(figures[1])


def test_too_few_ddp_samples_on_a_rank_leave_the_judgement_to_backward() -> None:
    waiting = [0.5, 0.0, 0.5, 11.0, 0.5, 0.0]
    late = [0.5, 0.0, 0.5, 1.0, 0.5, 0.0]
    figures = [
        RankFigures.of(0, 0, "n", _view(waiting), collective=_samples(0.5)),
        RankFigures.of(1, 1, "n", _view(late, gap_ms=10.0), collective=_samples(9.0, n=2)),
    ]
    found = find_straggler(figures)
    assert found is not None and found.rank == 1
    assert "others wait for it in backward (p50 11.0 ms against its 1.0 ms)" in found.sentence


def test_the_newest_ddp_samples_make_the_p50() -> None:
    old = _samples(50.0, n=40)
    new = [
        CollectiveSample(t_ns=100 + i, iteration=100 * (i + 1), comm_ns=2_000_000)
        for i in range(20)
    ]
    figures = RankFigures.of(0, 0, "n", _view(EVEN), collective=old + new)
    assert figures.allreduce_ms_p50 == pytest.approx(2.0)
    assert figures.allreduce_samples == 20


def test_a_ranks_busy_is_the_share_of_its_steps_its_device_worked() -> None:
    """On a CPU the host phases are the device's marks: busy is the compute phases' share."""
    view = _view([5.0, 0.0, 2.0, 2.0, 1.0, 0.0])
    on_cpu = dataclasses.replace(view, device=view.host.copy(), has_device=np.ones(len(view), bool))
    assert RankFigures.of(0, 0, "n", view).busy is None  # no device marks: not known
    busy = RankFigures.of(0, 0, "n", on_cpu).busy
    assert busy == pytest.approx(0.5)  # 5 of 10 ms a step: forward, backward, optimizer
    assert "busy: 50 %" in rank_line(RankFigures.of(0, 0, "n", on_cpu))


def test_a_small_forward_difference_is_no_straggler() -> None:
    """Half a millisecond more forward in a 30 ms step is noise, not a slower device."""
    base = [1.0, 0.0, 0.5, 27.0, 1.5, 0.0]
    slower = [1.0, 0.0, 1.0, 26.5, 1.5, 0.0]
    assert find_straggler(_ranks(base, slower, base)) is None


def test_even_ranks_have_no_straggler_and_too_few_steps_are_not_judged() -> None:
    assert find_straggler(_ranks(EVEN, EVEN, EVEN)) is None
    slow = [30.0, 0.0, 2.0, 2.0, 1.0, 0.0]
    few = [RankFigures.of(0, 0, "n", _view(EVEN)), RankFigures.of(1, 1, "n", _view(slow, n=3))]
    assert find_straggler(few) is None


def test_nproc_per_node_is_torchrun_standalone_on_this_machine() -> None:
    assert torchrun_args(4, None, "train.py", ("--lr", "1")) == (
        "--standalone",
        "--nproc-per-node",
        "4",
        "train.py",
        "--lr",
        "1",
    )
    assert torchrun_args(2, "pkg.train", None, ())[-2:] == ("-m", "pkg.train")


class _RankedRun:
    """What the advisor reads of a Session of many ranks."""

    hello = None

    def __init__(self, figures: list[RankFigures]) -> None:
        self.figures = figures
        self.knobs: list[dict[str, object]] = []

    def config_values(self) -> dict[str, object]:
        return {}

    def config_changes(self) -> list[object]:
        return []

    def rank_figures(self) -> list[RankFigures]:
        return self.figures


def _steady() -> SegmentStats:
    """Rank 0's steady segment, waiting in backward."""
    return SegmentStats(
        config_id=0,
        label="config 0",
        settings={},
        changed={},
        t_ns=0,
        steps=100,
        steady_steps=90,
        samples_per_s=100.0,
        window_rates=(100.0, 100.0, 100.0),
        idle_causes={"input": 1.0},
        breakdown={"kernel": 30.0, "data_loading": 1.0},
        host_phases={"data": 1.0, "forward": 2.0, "backward": 31.0},
    )


def test_the_advisor_names_the_straggler_first_and_offers_no_knob() -> None:
    slow = [30.0, 0.0, 2.0, 2.0, 1.0, 0.0]
    waiting = [1.0, 0.0, 2.0, 31.0, 1.0, 0.0]
    ctx = context_of(_RankedRun(_ranks(waiting, slow)))  # type: ignore[arg-type]
    assert ctx.straggler is not None and ctx.straggler.rank == 1
    findings = advise([_steady()], ctx)
    assert findings[0].rule == "straggler"
    assert "device-bound" not in [f.rule for f in findings], "rank 0 waits: not 'all is well'"
    assert findings[0].title == "Rank 1 holds the other ranks back"
    assert not findings[0].suggestion
    assert context_of(_RankedRun(_ranks(EVEN, EVEN))).straggler is None  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "rule, quantity",
    [
        ("input", "input wait"),
        ("compute", "forward"),
        ("allreduce", "all-reduce wait"),
        ("step", "step time"),
    ],
)
def test_every_straggler_rule_gives_the_advisor_a_card(rule: StragglerRule, quantity: str) -> None:
    """Each rule ``find_straggler`` can name becomes a card: a rule without one would raise
    in the window's panel refresh and stop its panels."""
    assert set(RULE_QUANTITY) == set(get_args(StragglerRule))
    ctx = context_of(_RankedRun(_ranks(EVEN, EVEN)))  # type: ignore[arg-type]
    ctx = dataclasses.replace(ctx, straggler=Straggler(1, rule, "rank 1 is late"))
    [finding] = [f for f in advise([_steady()], ctx) if f.rule == "straggler"]
    assert finding.quantity == quantity and finding.evidence == "rank 1 is late"


def test_torchruns_flags_are_the_ones_its_parser_takes_without_a_value() -> None:
    """The GUI never imports torch, so it keeps the list; this is where it is checked."""
    run = pytest.importorskip("torch.distributed.run")
    parser = run.get_args_parser()
    flags = {
        opt for action in parser._actions if action.nargs == 0 for opt in action.option_strings
    }
    assert flags == TORCHRUN_FLAGS


@pytest.mark.parametrize(
    ("args", "name"),
    [
        (("--standalone", "--nproc-per-node", "2", "/w/train.py", "30"), "train.py (torchrun)"),
        (("--nnodes=1", "-m", "pkg.train", "x"), "pkg.train (torchrun)"),
        (("--rdzv-endpoint", "127.0.0.1:29400", "t.py", "--standalone"), "t.py (torchrun)"),
        (("--nproc-per-node", "2"), "torchrun"),
    ],
)
def test_a_torchrun_run_is_named_after_its_training_script(
    args: tuple[str, ...], name: str
) -> None:
    assert LaunchSpec(module="torch.distributed.run", script_args=args).name == name


def _row(config_id: int, rate: float | None, step_ms: float | None) -> SegmentStats:
    return SegmentStats(
        config_id=config_id,
        label=f"config {config_id}",
        settings={},
        changed={},
        t_ns=0,
        steps=100,
        steady_steps=90,
        samples_per_s=rate,
        step_ms_p50=step_ms,
    )


def test_each_configuration_row_sums_the_ranks_and_gives_their_step_spread() -> None:
    rows = [_row(0, 100.0, 10.0), _row(1, 150.0, 7.0)]
    per_rank = [
        [_row(0, 100.0, 10.0), _row(1, 150.0, 7.0)],
        [_row(0, 98.0, 10.4), _row(1, None, None)],  # still in its transition: not counted
    ]
    first, second = with_ranks(rows, per_rank)
    assert first.ranks_samples_per_s == pytest.approx(198.0) and first.ranks_counted == 2
    assert first.rank_step_ms == (10.0, 10.4)
    assert second.ranks_samples_per_s == pytest.approx(150.0) and second.ranks_counted == 1
    assert with_ranks(rows, [])[0].ranks_samples_per_s is None
