"""Kernel windows built from real A100 traces agree with HolisticTraceAnalysis on the same files.

The fixtures (``tests/fixtures/gpu_traces/*/SOURCE.md``) are ``torch.profiler`` traces from
HTA's own test data. ``gpu_trace_events`` hands their events to the runner's real
``window_message``; the message goes through the protocol into ``KernelWindow``; HTA's
``TraceAnalysis`` reads the same file. Where a figure is defined differently from HTA's
(docs/advisor.md, "Checked against HTA on real GPU traces"), both are computed and the
difference is asserted to be exactly the documented one. HTA keeps the trace's µs; gpuwatch
counts ns.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
import pytest
from gpu_trace_events import GpuTrace, TraceEvent, fixture_path, load_trace
from hta.trace_analysis import TraceAnalysis

from gpuwatch import protocol
from gpuwatch.core.figures.analysis import merge_intervals
from gpuwatch.core.figures.kernel_window import KERNEL_WAIT_NS, KernelWindow, WindowSummary
from gpuwatch.runner.kernel_capture import window_message

#: HTA 0.5.0 calls pandas with ``inplace=``, which pandas 3 deprecates: its noise, not ours.
pytestmark = pytest.mark.filterwarnings("ignore::Warning:hta")
US = 1000
#: Traces with kernels on one or more streams and runtime launches (A100, see SOURCE.md).
COMPARED = ["simple_add", "alexnet", "multi_stream"]
#: HTA's GPU activities in its idle time breakdown (``BreakdownAnalysis``).
HTA_DEVICE_CATS = ("kernel", "gpu_memcpy", "gpu_memset")


@dataclass(frozen=True)
class Compared:
    """One trace, read by gpuwatch (two windows) and by HTA."""

    trace: GpuTrace
    ours: WindowSummary  # gpuwatch's window: here the span the profiler recorded
    on_hta_bounds: WindowSummary  # the same events over HTA's window (first..last activity)
    hta: TraceAnalysis
    hta_events: pd.DataFrame  # HTA's parsed trace, category and name decoded

    def hta_idle(self, delay: float = 30) -> dict[str, float]:
        """HTA's idle time breakdown (µs) summed over streams, by category."""
        idle, _ = self.hta.get_idle_time_breakdown(visualize=False, consecutive_kernel_delay=delay)
        return idle.groupby("idle_category")["idle_time"].sum().to_dict()

    def hta_intervals(self) -> pd.DataFrame:
        """HTA's interval statistics (count, 50% ...), one row per stream and category."""
        _, stats = self.hta.get_idle_time_breakdown(visualize=False, show_idle_interval_stats=True)
        assert stats is not None
        return stats

    def hta_temporal(self) -> dict[str, Any]:
        return self.hta.get_temporal_breakdown(visualize=False).iloc[0].to_dict()


def summarize(trace: GpuTrace, t0: int, t1: int) -> tuple[KernelWindow, WindowSummary]:
    """The runner's conversion, the wire, then the GUI side, as in a live capture."""
    offset = t0 - 5_000_000_000  # epoch -> a host axis starting near 5 s
    message = window_message(
        list(trace.events),
        device="cuda",
        offset_ns=offset,
        t0_ns=t0 - offset,
        t1_ns=t1 - offset,
        steps=[1],
        perturbed=[0, 1],
    )
    window = KernelWindow.from_message(protocol.decode(protocol.encode("kernels", **message)))
    return window, window.summary()


@pytest.fixture(scope="module", params=COMPARED)
def compared(request: pytest.FixtureRequest) -> Compared:
    path = fixture_path(request.param)
    trace = load_trace(path)
    _, ours = summarize(trace, *trace.profiler_span_ns())
    _, on_hta_bounds = summarize(trace, *trace.device_span_ns())
    hta = TraceAnalysis(trace_files={0: str(path)})
    events = hta.t.get_trace(0).copy()
    symbols = hta.t.symbol_table.get_sym_table()
    events["cat"] = events["cat"].map(lambda i: symbols[i])
    events["name"] = events["name"].map(lambda i: symbols[i])
    return Compared(trace, ours, on_hta_bounds, hta, events)


def union_ns(events: list[TraceEvent]) -> int:
    s, e = merge_intervals(
        np.array([x.start_ns() for x in events], np.int64),
        np.array([x.end_ns() for x in events], np.int64),
    )
    return int((e - s).sum())


# ---- figures that equal HTA's -------------------------------------------------------------


def test_kernel_and_copy_counts_are_htas(compared: Compared) -> None:
    cats = compared.hta_events["cat"].value_counts()
    assert compared.ours.kernels == cats["kernel"] > 0
    assert compared.ours.copies == cats.get("gpu_memcpy", 0) + cats.get("gpu_memset", 0) > 0


def test_idle_split_is_htas_idle_time_breakdown(compared: Compared) -> None:
    hta = compared.hta_idle()
    idle = compared.ours.idle
    assert idle.host_wait_ns == round(hta["host_wait"] * US) > 0
    assert idle.kernel_wait_ns == round(hta["kernel_wait"] * US) > 0
    assert idle.other_ns == round(hta.get("other", 0) * US)
    # Summed over streams, each stream's gaps between its own events: not the all-stream
    # idle time of HTA's temporal breakdown (window minus the union), which differs.
    assert idle.total_ns != round(compared.hta_temporal()["idle_time(us)"] * US)


def test_launch_gaps_are_htas_idle_intervals(compared: Compared) -> None:
    stats = compared.hta_intervals()
    assert compared.ours.launch_gaps == int(stats["count"].sum())
    assert compared.ours.launch_gap_total_ns == compared.ours.idle.total_ns
    # The median over all streams, from the intervals HTA's breakdown forms (per stream, by
    # start: this start minus the previous activity's end) on HTA's own parsed events.
    gpu = compared.hta_events[
        compared.hta_events["cat"].isin(HTA_DEVICE_CATS) & compared.hta_events["stream"].ne(-1)
    ]
    intervals = []
    for _, stream in gpu.sort_values("ts").groupby("stream"):
        gap = stream["ts"] - (stream["ts"] + stream["dur"]).shift(1)
        intervals.extend(gap.dropna().tolist())
    assert min(intervals) > 0  # no zero or negative gaps here: see the advisor.md note
    assert compared.ours.launch_gap_median_ns == pytest.approx(float(np.median(intervals)) * US)


def test_busy_share_is_htas_temporal_breakdown_less_cuda_sync_records(compared: Compared) -> None:
    """HTA's temporal breakdown counts ``cuda_sync`` records with a stream (a host waiting on
    a stream, a stream waiting on an event, and a context sync where Kineto wrote CUPTI's
    unsigned 4294967295 rather than -1) as GPU time and stretches its window over them;
    gpuwatch counts kernels, copies and memsets only. With those records added back the two
    agree exactly."""
    hta = compared.hta_temporal()
    hta_window = round(hta["kernel_time(us)"] * US)
    hta_busy = hta_window - round(hta["idle_time(us)"] * US)
    device = compared.trace.gpu_events()
    syncs = [e for e in compared.trace.of_activity("cuda_sync") if e.device_resource_id() != -1]
    sync_only = union_ns(device + syncs) - union_ns(device)
    ours = compared.on_hta_bounds
    assert ours.busy_ns == union_ns(device)
    assert sync_only > 0 and hta_busy == ours.busy_ns + sync_only
    with_syncs = device + syncs
    assert hta_window == (
        max(e.end_ns() for e in with_syncs) - min(e.start_ns() for e in with_syncs)
    )
    assert ours.window_ns <= hta_window


def test_gpuwatch_window_differs_from_htas_by_its_bounds_only(compared: Compared) -> None:
    """gpuwatch's window runs over the recorded steps (here the span the profiler recorded);
    HTA's from the first GPU activity to the last: the busy time is the same."""
    ours, hta_bounds = compared.ours, compared.on_hta_bounds
    t0, t1 = compared.trace.profiler_span_ns()
    first, last = compared.trace.device_span_ns()
    assert ours.busy_ns == hta_bounds.busy_ns
    assert ours.window_ns == max(t1, last) - t0 > hta_bounds.window_ns == last - first
    assert ours.busy_fraction is not None and hta_bounds.busy_fraction is not None
    assert ours.busy_fraction * ours.window_ns == pytest.approx(
        hta_bounds.busy_fraction * hta_bounds.window_ns
    )
    assert ours.idle == hta_bounds.idle and ours.launch_gaps == hta_bounds.launch_gaps


def test_kernel_wait_is_htas_30_in_trace_microseconds_not_30_ns(compared: Compared) -> None:
    """HTA documents ``consecutive_kernel_delay=30`` as ns but applies it to µs timestamps."""
    assert KERNEL_WAIT_NS == 30 * US
    as_documented = compared.hta_idle(delay=30 / US)  # what 30 ns would have meant
    assert as_documented.get("kernel_wait", 0) == 0
    assert round(as_documented["other"] * US) == (
        compared.ours.idle.kernel_wait_ns + compared.ours.idle.other_ns
    )


# ---- the runner's conversion on real records --------------------------------------------


@pytest.mark.parametrize("name", COMPARED)
def test_every_real_kernel_and_copy_gets_its_launch_and_geometry(name: str) -> None:
    trace = load_trace(fixture_path(name))
    window, summary = summarize(trace, *trace.profiler_span_ns())
    kernel = protocol.KERNEL_KINDS.index("kernel")
    raw = [json.loads("{" + e.metadata_json() + "}") for e in trace.of_activity("kernel")]
    assert summary.geometry_known == len(raw)
    assert summary.underfilled == sum(1 for m in raw if m["blocks per SM"] < 1)
    kernels = [i for i in range(len(window)) if window.kind[i] == kernel]
    assert sorted(window.grid[i] for i in kernels) == sorted(tuple(m["grid"]) for m in raw)
    assert (window.launch >= 0).all()  # every activity's runtime call was found
    assert (window.launch <= window.start).all()  # and it came before the activity
    # Synchronization records sit on a stream's lane but are not device work.
    assert not {"Stream Sync", "Context Sync", "Event Sync", "Stream Wait Event"} & set(
        window.names
    )


def test_driver_launch_and_nanosecond_timestamps_of_a_triton_kernel() -> None:
    trace = load_trace(fixture_path("triton_driver_launch"))
    [launch] = trace.of_activity("cuda_driver")
    [kernel] = trace.of_activity("kernel")
    assert launch.name() == "cuLaunchKernel" and launch.correlation_id() == 35
    window, summary = summarize(trace, *trace.profiler_span_ns())
    [i] = range(len(window))
    offset = trace.profiler_span_ns()[0] - int(window.t0_ns)
    assert int(window.launch[i]) + offset == launch.start_ns()
    assert int(window.start[i]) + offset == kernel.start_ns()
    assert int(window.end[i] - window.start[i]) == 1_760  # "dur": 1.76 µs, kept to the ns
    assert window.names == ("triton_poi_fused_add_cos_sin_0",)
    assert summary.underfilled == 1 and summary.underfilled_busy_share == 1.0  # 1 block
