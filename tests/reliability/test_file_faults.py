"""Input files that hang or crash, and outputs that lie about being complete.

A FIFO given as the recording, a month-long recording in the replay bar, a NaN in a
recording, a full disk or a kill during an export, two exports to one path, and a large
Perfetto export (streamed, in bounded memory). Recordings are synthetic
(``synthetic_recording.write_recording``): a month or a million steps cost milliseconds.
"""

from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import sys
import textwrap
import tracemalloc
from pathlib import Path

import pytest
from synthetic_recording import write_recording

from gpuwatch.commands.export_command import ExportError, export_recording
from gpuwatch.core.files import export_csv, export_perfetto
from gpuwatch.core.files.export_perfetto import write_perfetto
from gpuwatch.core.files.recording import RecordingError
from gpuwatch.core.files.recording_reader import open_recording

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="FIFOs and signals are POSIX")

ROOT = Path(__file__).resolve().parents[2]
#: A CLI that hangs is a failure, not a wait: far above its start-up on a loaded machine.
CLI_TIMEOUT_S = 90
GOOD = "a good export from before\n"


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "QT_QPA_PLATFORM": "offscreen"}
    try:
        return subprocess.run(
            [sys.executable, "-m", "gpuwatch", *args],
            check=False,
            cwd=cwd,
            env=env,
            capture_output=True,
            text=True,
            timeout=CLI_TIMEOUT_S,
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"gpuwatch {' '.join(args)} hung (no end after {CLI_TIMEOUT_S} s)")


def _partials(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.endswith(".partial"))


@pytest.mark.parametrize("command", ["export", "replay"])
def test_a_fifo_as_the_recording_is_refused_at_once(tmp_path: Path, command: str) -> None:
    fifo = tmp_path / "run.gpuwatch"
    os.mkfifo(fifo)
    args = [command, str(fifo)] + (
        ["--csv", str(tmp_path / "out.csv")] if command == "export" else []
    )
    done = _cli(*args, cwd=tmp_path)
    assert done.returncode == 1, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "named pipe (FIFO)" in lines[0], done.stderr
    assert "not a gpuwatch recording" in lines[0]
    with pytest.raises(RecordingError, match="FIFO"):
        open_recording(fifo)


def test_replay_of_a_month_long_recording_scales_its_slider(qtbot, tmp_path: Path) -> None:
    from gpuwatch.core.files.replay import ReplaySession
    from gpuwatch.qt.replay_bar import ReplayBar

    month_ns = 30 * 24 * 3600 * 10**9  # beyond 2**31 ms (24.86 days)
    replay = ReplaySession(
        open_recording(write_recording(tmp_path / "month.gpuwatch", 100, span_ns=month_ns))
    )
    assert replay.duration_s > 2**31 / 1000
    bar = ReplayBar(replay)
    qtbot.addWidget(bar)
    assert 0 < bar.slider.maximum() <= 2**31 - 1
    assert bar.slider.value() == bar.slider.maximum()  # opened at the end
    bar.slider.setValue(bar.slider.maximum() // 2)  # a release of the handle seeks
    assert replay.position_s == pytest.approx(replay.duration_s / 2, abs=1e-2)
    bar.seek(29 * 24 * 3600.0)
    assert bar.position_label.text() == "696:00:00"
    assert bar.slider.value() == round(29 * 24 * 3600 * 1000 / bar.unit_ms)


def test_a_nan_in_a_recording_is_exported_as_null(tmp_path: Path) -> None:
    source = write_recording(tmp_path / "nan.gpuwatch", 50, changed='{"amp": NaN}')
    trace, table = tmp_path / "trace.json", tmp_path / "steps.csv"
    trace.write_text(GOOD)
    lines = export_recording(source, perfetto=trace, csv=table)
    assert len(lines) == 2
    events = json.loads(trace.read_text(), parse_constant=pytest.fail)["traceEvents"]
    segments = [e for e in events if e.get("cat") == "config" and e["ph"] == "X"]
    assert segments[1]["args"]["changed"] == {"amp": None}
    assert len(table.read_text().splitlines()) == 51
    assert _partials(tmp_path) == []


@pytest.mark.parametrize("what", ["perfetto", "csv"])
def test_a_full_disk_during_an_export_leaves_the_old_file_and_no_partial(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, what: str
) -> None:
    source = write_recording(tmp_path / "run.gpuwatch", 50)
    out = tmp_path / f"out.{what}"
    out.write_text(GOOD)
    module, name = (
        (export_perfetto, "write_perfetto_to")
        if what == "perfetto"
        else (export_csv, "write_csv_to")
    )
    original = getattr(module, name)

    def half_then_full(recording, stream, *args):
        stream.write("{half of it")
        stream.flush()
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(module, name, half_then_full)
    with pytest.raises(ExportError, match=r"No space left on device.*unchanged"):
        export_recording(source, **{what: out})
    assert out.read_text() == GOOD
    assert _partials(tmp_path) == []
    monkeypatch.setattr(module, name, original)
    export_recording(source, **{what: out})
    assert out.read_text() != GOOD


KILLED_EXPORT = textwrap.dedent("""
    import sys, time
    from gpuwatch.core.files import export_perfetto
    def stuck(recording, stream, progress=None):
        stream.write('{"traceEvents":[')
        stream.flush()
        print("writing", flush=True)
        time.sleep(600)
    export_perfetto.write_perfetto_to = stuck
    from gpuwatch.commands.export_command import export_recording
    export_recording(sys.argv[1], perfetto=sys.argv[2])
""")


def test_a_killed_export_leaves_the_old_file_and_the_next_one_clears_its_temp(
    tmp_path: Path,
) -> None:
    source = write_recording(tmp_path / "run.gpuwatch", 50)
    out = tmp_path / "trace.json"
    out.write_text(GOOD)
    writer = subprocess.Popen(
        [sys.executable, "-c", KILLED_EXPORT, str(source), str(out)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert writer.stdout is not None and writer.stdout.readline().strip() == "writing"
        writer.send_signal(signal.SIGKILL)
        writer.wait(30)
    finally:
        if writer.poll() is None:
            writer.kill()
    assert out.read_text() == GOOD
    left = _partials(tmp_path)
    assert len(left) == 1 and left[0].startswith(f".trace.json.{writer.pid}."), left
    export_recording(source, perfetto=out)
    assert json.loads(out.read_text())["traceEvents"]
    assert _partials(tmp_path) == []


def test_csv_and_perfetto_to_the_same_file_are_refused(tmp_path: Path) -> None:
    source = write_recording(tmp_path / "run.gpuwatch", 20)
    out = tmp_path / "out.txt"
    out.write_text(GOOD)
    (tmp_path / "sub").mkdir()
    for perfetto, csv in ((out, out), (out, tmp_path / "sub" / ".." / "out.txt")):
        with pytest.raises(ExportError, match="name the same file"):
            export_recording(source, perfetto=perfetto, csv=csv)
    os.link(out, tmp_path / "hard.txt")
    with pytest.raises(ExportError, match="name the same file"):
        export_recording(source, perfetto=out, csv=tmp_path / "hard.txt")
    assert out.read_text() == GOOD
    done = _cli("export", str(source), "--perfetto", str(out), "--csv", str(out), cwd=tmp_path)
    assert done.returncode == 1 and "same file" in done.stderr
    assert out.read_text() == GOOD


def test_an_export_never_replaces_a_device_or_pipe(tmp_path: Path) -> None:
    source = write_recording(tmp_path / "run.gpuwatch", 20)
    fifo = tmp_path / "out.fifo"
    os.mkfifo(fifo)
    with pytest.raises(ExportError, match="not a regular file"):
        export_recording(source, csv=fifo)
    assert Path(fifo).is_fifo()


def test_the_perfetto_export_streams_in_bounded_memory_with_progress(tmp_path: Path) -> None:
    """20,000 steps (180,000 events): the whole-trace-in-memory export peaked at 76 MB here;
    streamed, the export's own allocations stay a few chunks (the bench measures 1.7 M)."""
    steps = 20_000
    recording = open_recording(write_recording(tmp_path / "big.gpuwatch", steps))
    out = tmp_path / "trace.json"
    fractions: list[float] = []
    tracemalloc.start()
    try:
        written = write_perfetto(recording, out, fractions.append)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    print(f"\n{written:,} events, peak {peak / 2**20:.1f} MiB allocated while exporting")
    assert peak < 24 * 2**20
    assert fractions == sorted(fractions) and len(fractions) > 10 and fractions[-1] == 1.0
    events = json.loads(out.read_text(), parse_constant=pytest.fail)["traceEvents"]
    assert len(events) == written
    timed = [e["ts"] for e in events if e["ph"] != "M"]
    assert timed == sorted(timed)
    forward = [e for e in events if e.get("name") == "forward"]
    assert len(forward) == steps and forward[-1]["args"] == {"step": steps - 1, "config": 1}


def test_export_progress_goes_to_stderr(tmp_path: Path) -> None:
    source = write_recording(tmp_path / "run.gpuwatch", 20_000)
    done = _cli("export", str(source), "--perfetto", str(tmp_path / "t.json"), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "gpuwatch: writing" in done.stderr and "%" in done.stderr
    assert "wrote Perfetto trace of 20000 steps" in done.stderr


def test_a_recording_of_steps_beyond_32_bit_sample_counts_reads_back_exact(
    tmp_path: Path,
) -> None:
    """The live store keeps 64-bit sample counts (a script counting tokens passes 2**31); the
    reader held them in 32 bits, so a replay wrapped them negative."""
    many = 2**31 + 7
    recording = open_recording(write_recording(tmp_path / "tokens.gpuwatch", 10, samples=many))
    assert recording.steps.samples.tolist() == [many] * 10
    replayed = [m for _, m in recording.messages() if m["kind"] == "steps"]
    assert replayed and all(n == many for m in replayed for n in m["samples"])


def test_a_recorded_script_run_names_the_device_its_device_message_named(
    tmp_path: Path,
) -> None:
    """A watched script's hello says ``pending`` until the script used CUDA; the recording's
    hello must take the device the later ``device`` message named (the live session does)."""
    import sqlite3

    path = write_recording(tmp_path / "script.gpuwatch", 10)
    conn = sqlite3.connect(path, isolation_level=None)
    (body,) = conn.execute("SELECT body FROM events WHERE kind = 'hello'").fetchone()
    hello = json.loads(body)
    hello["device"] = {"kind": "cuda", "pending": True, "name": "CUDA (pending)"}
    conn.execute("UPDATE events SET body = ? WHERE kind = 'hello'", (json.dumps(hello),))
    named = {"kind": "cuda", "index": 0, "name": "NVIDIA A100", "uuid": "GPU-1"}
    conn.execute(
        "INSERT INTO events VALUES (1000000, 1, 'device', ?)", (json.dumps({"device": named}),)
    )
    conn.close()
    hello = open_recording(path).hello
    assert hello is not None and hello.device.raw == named and hello.device.name == "NVIDIA A100"
