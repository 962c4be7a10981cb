"""``gpuwatch bench``: the report formats, the headless run against a scripted session, and
end to end with a real CPU runner."""

from __future__ import annotations

import csv
import io
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from test_recording import rebuild
from test_tour import FakeSession, schema

from gpuwatch.commands.bench import BenchOptions, run_bench
from gpuwatch.commands.bench_report import BenchReport, render
from gpuwatch.commands.progress_line import ProgressLine
from gpuwatch.core.figures.segments import SegmentStats
from gpuwatch.core.files.recording_reader import open_recording
from gpuwatch.core.model.messages import ConfigChange, Hello
from gpuwatch.core.model.store import StepStore
from gpuwatch.core.run.session import LogLine, SessionState
from gpuwatch.protocol import BUILTIN_KNOB_NAMES

MACHINE = {
    "device": "AMD EPYC 7B13",
    "device_kind": "cpu",
    "os": "Linux-6.1-x86_64",
    "python": "3.11.9",
    "torch": "2.14.1",
    "cuda": None,
    "driver_model": None,
    "cores": 2,
    "timing": "host",
}


def segment(label: str, **figures: Any) -> dict[str, Any]:
    base = {
        "label": label,
        "settings": {"num_workers": 0},
        "changed": {},
        "samples_per_s": None,
        "step_ms_p50": None,
        "step_ms_p95": None,
        "busy_share": None,
        "input_wait_share": None,
        "coarse_util": None,
        "coarse_source": None,
        "energy_j_per_step": None,
        "speedup": None,
        "steps": 3,
        "steady_steps": 0,
        "transition_s": None,
    }
    return {**base, **figures}


def sample_report() -> BenchReport:
    measured = segment(
        "num_workers=2",
        changed={"num_workers": 2},
        samples_per_s=362.14,
        step_ms_p50=85.2,
        step_ms_p95=97.0,
        busy_share=0.43,
        input_wait_share=0.52,
        coarse_util=0.49,
        coarse_source="proc.cpu",
        speedup=1.0,
        steps=240,
        steady_steps=236,
        transition_s=0.9,
        energy_j_per_step=float("nan"),
        config_id=4,
        kept=True,
    )
    return BenchReport(
        machine=dict(MACHINE),
        workload="vision",
        seconds_per_stage=20.0,
        segments=[segment("baseline"), measured],
        skipped=[{"label": "pinned memory", "reason": "needs CUDA"}],
        baseline="baseline",
    )


# ---- Report formats ---------------------------------------------------------------------------


def test_json_follows_the_contract() -> None:
    data = json.loads(render(sample_report(), "json"))
    assert list(data) == [
        "schema",
        "gpuwatch",
        "machine",
        "workload",
        "seconds_per_stage",
        "baseline",
        "segments",
        "skipped",
        "summary",
        "findings",
        "instrumentation_share",
    ]
    assert data["schema"] == 1 and isinstance(data["gpuwatch"], str)
    assert data["instrumentation_share"] is None  # the runner did not say
    assert data["machine"] == MACHINE
    assert data["seconds_per_stage"] == 20 and isinstance(data["seconds_per_stage"], int)
    assert data["baseline"] == "baseline"
    assert data["skipped"] == [{"label": "pinned memory", "reason": "needs CUDA"}]
    assert data["summary"] is None  # not a tour
    first, second = data["segments"]
    assert list(second) == [
        "label",
        "settings",
        "changed",
        "kept",
        "samples_per_s",
        "step_ms_p50",
        "step_ms_p95",
        "busy_share",
        "input_wait_share",
        "coarse_util",
        "coarse_source",
        "energy_j_per_step",
        "speedup",
        "steps",
        "steady_steps",
        "transition_s",
        "idle_causes",
        "breakdown",
    ]
    # Not measured is null, never 0 (NaN included); shares stay fractions.
    assert all(
        first[k] is None
        for k in ("samples_per_s", "busy_share", "speedup", "transition_s", "coarse_source")
    )
    assert second["energy_j_per_step"] is None
    assert second["busy_share"] == 0.43 and second["input_wait_share"] == 0.52
    assert isinstance(second["steps"], int) and second["changed"] == {"num_workers": 2}
    assert first["kept"] is None and second["kept"] is True


def test_every_format_says_what_the_instruments_cost() -> None:
    report = sample_report()
    report.instrumentation_share = 0.0011
    assert json.loads(render(report, "json"))["instrumentation_share"] == 0.0011
    line = "gpuwatch's instrumentation: 0.11 % of step time"
    assert f"- {line}" in render(report, "md")
    assert f"# {line}" in render(report, "csv")
    report.instrumentation_share = float("nan")
    assert json.loads(render(report, "json"))["instrumentation_share"] is None
    assert "instrumentation" not in render(report, "md")


def test_markdown_has_the_machine_the_columns_and_na() -> None:
    text = render(sample_report(), "md")
    header = next(line for line in text.splitlines() if line.startswith("- device:"))
    for needle in (
        "AMD EPYC 7B13 (cpu, 2 cores)",
        "OS: Linux-6.1-x86_64",
        "torch 2.14.1",
        "python 3.11.9",
        "driver model: n/a",
    ):
        assert needle in header
    assert "20 s per stage" in text and "timing: host" in text
    table = [line for line in text.splitlines() if line.startswith("|")]
    assert table[0] == (
        "| stage | settings changed | samples/s | step p50 ms | step p95 ms | "
        "busy % | input wait % | coarse % | energy J/step | speedup | "
        "transition s |"
    )
    assert table[2].startswith("| baseline | — | n/a | n/a |")
    assert table[3] == (
        "| num_workers=2 | num_workers=2 | 362.1 | 85.2 | 97.0 | 43 | 52 | 49 | n/a | 1.00× | 0.9 |"
    )
    assert "skipped: pinned memory (needs CUDA)" in text
    assert (
        "busy % is the share of time in compute phases (host timing); coarse % is the "
        "runner's CPU use" in text
    )


def test_csv_has_a_commented_header_and_na() -> None:
    text = render(sample_report(), "csv")
    comments = [line for line in text.splitlines() if line.startswith("#")]
    assert any("device: AMD EPYC 7B13" in c and "driver model: n/a" in c for c in comments)
    rows = list(
        csv.reader(
            io.StringIO("\n".join(line for line in text.splitlines() if not line.startswith("#")))
        )
    )
    assert rows[0][:3] == ["stage", "settings changed", "samples/s"]
    assert rows[1][0] == "baseline" and rows[1][2] == "n/a"
    assert rows[2][2] == "362.14" and rows[2][5] == "43.0" and rows[2][8] == "n/a"
    assert rows[0][-1] == "kept" and rows[1][-1] == "n/a" and rows[2][-1] == "yes"


def test_cuda_note_and_cuda_version() -> None:
    report = sample_report()
    report.machine.update(device_kind="cuda", cuda="12.8", driver_model="WDDM")
    text = render(report, "md")
    assert "torch 2.14.1 (CUDA 12.8)" in text and "driver model: WDDM" in text
    assert "coarse % is NVML GPU utilization" in text


# ---- Progress line ----------------------------------------------------------------------------


def test_plain_progress_is_rate_limited_and_tty_progress_rewrites_in_place() -> None:
    now = [0.0]
    plain = io.StringIO()
    line = ProgressLine(plain, tty=False, clock=lambda: now[0])
    for step in range(50):  # 5 s of ticks at 10 Hz, the state changing once
        now[0] = step * 0.1
        line.show((0, "steady" if step > 20 else "transition"), f"tick {step}")
    line.show("start", "starting…", tty_only=True)
    printed = plain.getvalue().splitlines()
    assert printed == ["tick 0", "tick 21"]

    tty = io.StringIO()
    line = ProgressLine(tty, tty=True, clock=lambda: now[0])
    line.show(1, "one")
    line.line("stage 2/2")
    assert tty.getvalue() == "\rone\x1b[K\r\x1b[Kstage 2/2\n"


# ---- run_bench against a scripted session -----------------------------------------------------


class ScriptedSession(FakeSession):
    """Says hello on start, applies every change at once, and reports a steady row per
    config whose rate grows with the workers; ``refuse_all`` plays a runner that refuses."""

    def __init__(
        self,
        *,
        fail_start: str | None = None,
        refuse_all: str | None = None,
        revert_with: str | None = None,
        slow_amp: bool = False,
    ) -> None:
        super().__init__(schema(cuda=False))
        self.state = SessionState.IDLE
        self.hello = None
        self._fail_start = fail_start
        self._refuse_all = refuse_all
        self._revert_with = revert_with
        self._slow_amp = slow_amp  # bf16 makes every step 3.5× slower (as when emulated)
        self.log: list[LogLine] = []
        self.stopped = False
        self.steps = StepStore(64)

    def drain_log(self) -> list[LogLine]:
        lines, self.log = self.log, []
        return lines

    @property
    def knobs(self) -> list[dict[str, Any]]:
        return [k.to_message() for k in self.hello.knobs] if self.hello else []

    def start(self, spec: Any) -> None:
        if self._fail_start:
            self.state, self.error = SessionState.FAILED, self._fail_start
            return
        self.state = SessionState.RUNNING
        self.hello = Hello.from_message(
            {
                "knobs": schema(cuda=False),
                "workload": spec.workload,
                "timing": "host",
                "device": {"kind": "cpu", "name": "Test CPU", "cores": 2},
                "versions": {"python": "3.11.9", "torch": "2.14.1", "cuda": None},
            }
        )
        # two 10 ms steps, on which the runner's instruments spent 20 µs in all
        host = [[i * 10_000_000 + k for k in range(6)] + [(i + 1) * 10_000_000] for i in range(2)]
        self.steps.append([0, 1], [0, 0], [32, 32], host, instrument_ns=[5_000, 15_000])

    def set_knobs(self, values: dict[str, Any], *, label: str | None = None) -> int | None:
        request = super().set_knobs(values, label=label)
        assert request is not None
        if self._refuse_all:
            self.refuse(request, self._refuse_all)
            return request
        config_id = self.apply(request)
        if self._revert_with:  # the change's first step fails: the runner goes back
            previous = self.changes[-2]
            self.changes.append(
                ConfigChange(config_id + 1, previous.values, {}, 0, 50, 1, label=previous.label)
            )
            self.log.append(LogLine(0, "error", "runner", self._revert_with + "\ntraceback"))
        return request

    def scoreboard(self) -> list[SegmentStats]:
        base = 100.0
        rows = []
        for change in self.changes:
            rate = base * (1 + change.values["num_workers"])
            if self._slow_amp and change.values["amp"] == "bf16":
                rate /= 3.5
            rows.append(
                SegmentStats(
                    config_id=change.id,
                    label=change.label,
                    settings=change.values,
                    changed=change.changed,
                    t_ns=0,
                    steps=40,
                    steady_steps=35,
                    samples_per_s=rate,
                    busy_share=0.5,
                    input_wait_share=0.4 / (1 + change.values["num_workers"]),
                    speedup=rate / base,
                    window_rates=(rate, rate, rate),
                    steady_since_ns=0,
                    steady_until_ns=5_000_000_000,
                    transition_s=0.5,
                )
            )
        return rows

    def stop(self) -> None:
        self.stopped = True
        if self.state is SessionState.RUNNING:
            self.state = SessionState.FINISHED

    def wait_ended(self, timeout: float | None = None) -> bool:
        return True

    def close(self) -> None:
        self.stop()


def bench(session: ScriptedSession, **options: Any):
    progress = io.StringIO()
    outcome = run_bench(
        BenchOptions(workload="vision", device="cpu", seconds=2.0, **options),
        progress=progress,
        session=session,
        tick_s=0.0,
    )  # type: ignore[arg-type]
    return outcome, progress.getvalue()


def test_set_then_stages_are_measured_and_the_run_stopped() -> None:
    session = ScriptedSession()
    outcome, progress = bench(session, groups=[["num_workers=0"], ["num_workers=2"]])
    assert outcome.exit_code == 0 and outcome.error is None and session.stopped
    report = outcome.report
    assert report is not None
    assert [s["label"] for s in report.segments] == ["num_workers=0", "num_workers=2"]
    assert [s["samples_per_s"] for s in report.segments] == [100.0, 300.0]
    assert report.baseline == "num_workers=0"
    assert report.machine["device"] == "Test CPU" and report.machine["cores"] == 2
    assert "stage 2/2 num_workers=2: num_workers: what num_workers does" in progress
    assert report.instrumentation_share == pytest.approx(20_000 / 20_000_000)


def test_the_tour_reports_skipped_stages() -> None:
    outcome, progress = bench(ScriptedSession(), tour=True)
    assert outcome.exit_code == 0 and outcome.report is not None
    assert [s["label"] for s in outcome.report.segments] == [
        "baseline",
        "workers",
        "batched logging",
        "AMP",
        "channels_last",
        "compile",
    ]
    assert outcome.report.skipped == [{"label": "pinned memory", "reason": "needs CUDA"}]
    assert "skipped pinned memory: needs CUDA" in progress


def test_the_tour_reverts_a_slower_stage_and_every_format_says_so() -> None:
    outcome, progress = bench(ScriptedSession(slow_amp=True), tour=True)
    assert outcome.exit_code == 0 and outcome.report is not None
    segments = outcome.report.segments
    assert [(s["label"], s["kept"]) for s in segments] == [
        ("baseline", True),
        ("workers", True),
        ("batched logging", True),
        ("AMP — reverted", False),
        ("channels_last", True),
        ("compile", True),
    ]
    # channels_last builds on the kept configuration: bf16 went back off in its set.
    assert segments[4]["changed"] == {"amp": "off", "channels_last": True}
    assert segments[-1]["settings"]["amp"] == "off"
    summary = (
        "3.00× from workers; batched logging, channels_last and compile made no difference "
        "beyond noise; AMP did not help on this CPU and was reverted"
    )
    assert outcome.report.summary == summary
    assert "  AMP: 0.29× the best so far — reverted" in progress
    assert f"tour: {summary}" in progress
    data = json.loads(render(outcome.report, "json"))
    assert data["summary"] == summary
    assert [s["kept"] for s in data["segments"]] == [True, True, True, False, True, True]
    markdown = render(outcome.report, "md")
    assert "| AMP — reverted | amp=bf16 |" in markdown
    assert f"- tour: {summary}" in markdown
    assert "stages build on the last kept one): AMP\n" in markdown
    rows = list(csv.reader(line for line in render(outcome.report, "csv").splitlines()))
    table = [r for r in rows if r and not r[0].startswith("#")]
    assert [(r[0], r[-1]) for r in table[1:]][3] == ("AMP — reverted", "no")


def test_unknown_knob_is_a_usage_error_before_the_runner_starts() -> None:
    session = ScriptedSession()
    outcome, progress = bench(session, groups=[["num_workers=2"], ["nonsense=1"]])
    assert outcome.exit_code == 2 and outcome.report is None
    assert session.state is SessionState.IDLE and session.hello is None, "nothing started"
    assert outcome.error == (
        f"unknown knob 'nonsense'; known knobs: {', '.join(BUILTIN_KNOB_NAMES)}"
    )
    assert progress == "" and session.sent == []


def test_a_refused_stage_is_a_usage_error_with_the_runners_message() -> None:
    outcome, _ = bench(
        ScriptedSession(refuse_all="batch_size must be ≤ 64 here"), groups=[["batch_size=128"]]
    )
    assert outcome.exit_code == 2
    assert outcome.error == "stage 'batch_size=128' was refused: batch_size must be ≤ 64 here"


def test_a_reverted_stage_fails_the_run_with_the_runners_reason() -> None:
    outcome, _ = bench(
        ScriptedSession(revert_with="step failed: InductorError: no compiler"),
        groups=[[], ["compile=default"]],
    )
    assert outcome.exit_code == 1
    assert outcome.error == (
        "stage 'compile=default' failed in its first steps and the runner "
        "went back to the previous settings (the runner said: step failed: "
        "InductorError: no compiler)"
    )
    assert outcome.report is not None
    assert [s["label"] for s in outcome.report.segments] == ["baseline", "compile=default"]


def test_a_runner_that_fails_at_start_is_exit_1_with_its_error() -> None:
    outcome, _ = bench(ScriptedSession(fail_start="DeviceError: CUDA is not available"))
    assert outcome.exit_code == 1 and outcome.report is None
    assert outcome.error == "the run failed: DeviceError: CUDA is not available"


# ---- The command ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--set", "num_workers"], "'num_workers' is not a knob setting: write name=value"),
        (["--tour", "--set", "num_workers=2"], "not allowed with argument --tour"),
        (["--tour", "--then", "num_workers=2"], "--then adds stages to --set"),
        (["--format", "xml"], "invalid choice: 'xml'"),
        (["--seconds", "0"], "seconds must be between 0 and 86400"),
        (["--output", "/no/such/folder/report.md"], "folder '/no/such/folder' does not exist"),
    ],
)
def test_bad_bench_arguments_are_usage_errors(args: list[str], needle: str, capsys) -> None:
    from gpuwatch.cli import main

    with pytest.raises(SystemExit) as info:
        main(["bench", *args])
    assert info.value.code == 2
    assert needle in capsys.readouterr().err


@pytest.fixture
def scripted(monkeypatch) -> list[ScriptedSession]:
    """``gpuwatch bench`` runs against ScriptedSessions (collected here) instead of a runner."""
    import gpuwatch.commands.bench as bench_module

    made: list[ScriptedSession] = []

    def make(**kwargs: Any) -> ScriptedSession:
        made.append(ScriptedSession(**kwargs))
        return made[-1]

    monkeypatch.setattr(bench_module, "Session", make)
    return made


def test_bench_command_writes_the_report_to_a_file(scripted, tmp_path, capsys) -> None:
    from gpuwatch.cli import main

    target = tmp_path / "report.csv"
    code = main(
        [
            "bench",
            "--seconds",
            "1",
            "--format",
            "csv",
            "--output",
            str(target),
            "--set",
            "num_workers=0",
            "--then",
            "num_workers=2",
        ]
    )
    captured = capsys.readouterr()
    assert code == 0 and captured.out == ""
    assert f"gpuwatch: wrote {target}" in captured.err
    rows = [line for line in target.read_text().splitlines() if not line.startswith("#")]
    assert rows[1].startswith("num_workers=0,,100.00,") and rows[2].startswith("num_workers=2,")
    assert scripted[0].stopped


def test_ctrl_c_prints_what_was_measured_and_exits_130(scripted, monkeypatch, capsys) -> None:
    from gpuwatch.cli import main

    calls = {"n": 0}
    original = ScriptedSession.scoreboard

    def interrupted_in_stage_two(self: ScriptedSession) -> list[SegmentStats]:
        calls["n"] += 1
        if len(self.changes) > 1 and calls["n"] < 100:
            calls["n"] = 100
            raise KeyboardInterrupt
        return original(self)

    monkeypatch.setattr(ScriptedSession, "scoreboard", interrupted_in_stage_two)
    code = main(["bench", "--seconds", "1", "--then", "num_workers=2", "--then", "num_workers=4"])
    captured = capsys.readouterr()
    assert code == 130 and scripted[0].stopped
    assert captured.err.rstrip().endswith("gpuwatch: interrupted: stopped the run")
    table = [line for line in captured.out.splitlines() if line.startswith("| ")]
    assert [row.split(" | ")[0] for row in table[1:]] == ["| baseline", "| num_workers=2"]


def test_the_bench_path_never_imports_qt() -> None:
    code = (
        "import sys, gpuwatch.cli, gpuwatch.commands.bench, gpuwatch.commands.bench_report\n"
        "print(sorted(m for m in ('PySide6', 'pyqtgraph', 'torch') if m in sys.modules))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert done.stdout.strip() == "[]"


# ---- End to end: a real CPU runner ------------------------------------------------------------


def _gpuwatch(*args: str, timeout: float) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY")}
    env.pop("QT_QPA_PLATFORM", None)  # bench needs no display at all
    return subprocess.run(
        [sys.executable, "-m", "gpuwatch", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        check=False,
    )


@pytest.mark.timeout(600)
def test_bench_workers_beat_the_naive_loop_when_input_waits_for_storage(tmp_path: Path) -> None:
    """The bench measures a real speedup, and ``--record`` keeps the whole run. The input is slow
    storage (a sleep per sample), which two workers overlap whatever else the machine runs;
    CPU-bound decoding (the vision demo) gains from workers only while a core is free, so it
    cannot prove the direction beside another busy process."""
    record = tmp_path / "bench.gpuwatch"
    done = _gpuwatch(
        "bench",
        "--workload",
        "mlp",
        "--device",
        "cpu",
        "--seconds",
        "4",
        "--format",
        "json",
        "--set",
        "num_workers=0",
        "storage_latency_ms=0.25",
        "--then",
        "num_workers=2",
        "--record",
        str(record),
        timeout=570,
    )
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    data = json.loads(done.stdout)
    assert data["machine"]["device_kind"] == "cpu" and data["workload"] == "mlp"
    naive, workers = data["segments"]
    assert naive["label"] == "num_workers=0, storage_latency_ms=0.25"
    assert workers["changed"] == {"num_workers": 2}
    assert workers["samples_per_s"] > naive["samples_per_s"]
    assert workers["input_wait_share"] < naive["input_wait_share"]
    assert workers["speedup"] > 1 and naive["speedup"] == pytest.approx(1.0)
    assert naive["steady_steps"] >= 5 and workers["steady_steps"] >= 5

    recording = open_recording(record)
    assert f"gpuwatch: recorded {len(recording.steps)} steps to {record}" in done.stderr
    assert recording.meta["spec"] == {"command": "bench", "workload": "mlp", "device": "cpu"}
    assert recording.meta["closed"] is True and recording.bye is not None
    replayed = rebuild(recording).scoreboard()
    # Both stages steady from the file alone (after the runner's start, before the first --set).
    assert [row.steady for row in replayed][-2:] == [True, True], replayed


def test_bench_unknown_knob_exits_2_with_one_line() -> None:
    done = _gpuwatch("bench", "--device", "cpu", "--set", "nonsense=1", timeout=120)
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr == (
        f"gpuwatch: unknown knob 'nonsense'; known knobs: {', '.join(BUILTIN_KNOB_NAMES)}\n"
    )
