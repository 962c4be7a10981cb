"""The ``gpuwatch bench`` report and its three renderings: Markdown, CSV and JSON.

JSON is a contract (docs/knobs.md §5): shares are fractions, and a figure that could not be
measured is ``null``, never 0. Markdown and CSV show the same figures for people, with the
machine in a header and "n/a" for what is missing.
"""

from __future__ import annotations

import csv
import io
import json
import math
import platform
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from gpuwatch import __version__
from gpuwatch.core.figures.gap_causes import CAUSES
from gpuwatch.core.figures.step_breakdown import CATEGORIES, idle_summary, summary
from gpuwatch.core.model.messages import Hello, describe_change
from gpuwatch.core.run.tour import REVERTED

#: Bumped on any incompatible change of the JSON output.
SCHEMA_VERSION = 1
FORMATS = ("md", "csv", "json")

MACHINE_KEYS = (
    "device",
    "device_kind",
    "os",
    "python",
    "torch",
    "cuda",
    "driver_model",
    "cores",
    "timing",
)
SEGMENT_KEYS = (
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
)
#: ms per steady step, keyed by cause / category (docs/advisor.md); null when not steady.
_MS_DICT_KEYS = {"idle_causes": CAUSES, "breakdown": CATEGORIES}
_FLOAT_KEYS = frozenset(
    {
        "samples_per_s",
        "step_ms_p50",
        "step_ms_p95",
        "busy_share",
        "input_wait_share",
        "coarse_util",
        "energy_j_per_step",
        "speedup",
        "transition_s",
    }
)

#: Table columns: (header, segment key, how a value is shown in Markdown, in CSV).
COLUMNS: tuple[tuple[str, str, str, str], ...] = (
    ("samples/s", "samples_per_s", "{:,.1f}", "{:.2f}"),
    ("step p50 ms", "step_ms_p50", "{:.1f}", "{:.3f}"),
    ("step p95 ms", "step_ms_p95", "{:.1f}", "{:.3f}"),
    ("busy %", "busy_share", "pct:{:.0f}", "pct:{:.1f}"),
    ("input wait %", "input_wait_share", "pct:{:.0f}", "pct:{:.1f}"),
    ("coarse %", "coarse_util", "pct:{:.0f}", "pct:{:.1f}"),
    ("energy J/step", "energy_j_per_step", "{:.3g}", "{:.4g}"),
    ("speedup", "speedup", "{:.2f}×", "{:.3f}"),
    ("transition s", "transition_s", "{:.1f}", "{:.2f}"),
)
HEADERS = ("stage", "settings changed", *(c[0] for c in COLUMNS))
MISSING = "n/a"


@dataclass
class BenchReport:
    """What one bench run measured, in the shape of the JSON contract."""

    machine: dict[str, Any]
    workload: str
    seconds_per_stage: float
    segments: list[dict[str, Any]]
    skipped: list[dict[str, str]] = field(default_factory=list)
    baseline: str | None = None
    gpuwatch: str = __version__
    #: The advisor's findings on the last stage (``Finding.to_json``), best first.
    findings: list[dict[str, Any]] = field(default_factory=list)
    #: A tour's closing sentence (what helped, what was reverted); None otherwise.
    summary: str | None = None
    #: The share of step time the runner's own instruments spent, over the whole run (a
    #: fraction; None when the runner did not say).
    instrumentation_share: float | None = None

    def to_json(self) -> dict[str, Any]:
        seconds = self.seconds_per_stage
        return {
            "schema": SCHEMA_VERSION,
            "gpuwatch": self.gpuwatch,
            "machine": {key: self.machine.get(key) for key in MACHINE_KEYS},
            "workload": self.workload,
            "seconds_per_stage": int(seconds) if float(seconds).is_integer() else seconds,
            "baseline": self.baseline,
            "segments": [clean_segment(s) for s in self.segments],
            "skipped": [{"label": s["label"], "reason": s["reason"]} for s in self.skipped],
            "summary": self.summary,
            "findings": [dict(f) for f in self.findings],
            "instrumentation_share": _finite(self.instrumentation_share),
        }


def clean_segment(segment: Mapping[str, Any]) -> dict[str, Any]:
    """The contract's keys only, with every unmeasurable figure as None (never NaN or 0)."""
    out: dict[str, Any] = {}
    for key in SEGMENT_KEYS:
        value = segment.get(key)
        if key in _FLOAT_KEYS:
            value = _finite(value)
        elif key in _MS_DICT_KEYS:
            value = _ms_dict(value, _MS_DICT_KEYS[key])
        elif key == "kept":
            value = value if isinstance(value, bool) else None
        out[key] = value
    out["settings"] = dict(out["settings"] or {})
    out["changed"] = dict(out["changed"] or {})
    if isinstance(segment.get("kernel_window"), Mapping):  # only with ``bench --capture``
        out["kernel_window"] = dict(segment["kernel_window"])
    return out


def _ms_dict(value: Any, names: tuple[str, ...]) -> dict[str, float] | None:
    """Every name with a finite ms figure, or None when the segment was not measured."""
    if not isinstance(value, Mapping):
        return None
    figures = {name: value.get(name) for name in names}
    if not all(isinstance(v, int | float) and math.isfinite(v) for v in figures.values()):
        return None
    return {name: float(v) for name, v in figures.items()}


def machine_from_hello(hello: Hello | None) -> dict[str, Any]:
    """The ``machine`` object from the runner's ``hello`` (the OS is this machine's own)."""
    device = hello.device.to_message() if hello else {}
    versions = hello.versions if hello else {}
    return {
        "device": device.get("name"),
        "device_kind": device.get("kind"),
        "os": platform.platform(terse=True),
        "python": versions.get("python"),
        "torch": versions.get("torch"),
        "cuda": versions.get("cuda"),
        "driver_model": device.get("driver_model"),
        "cores": device.get("cores"),
        "timing": hello.timing if hello else "host",
    }


def render(report: BenchReport, fmt: str) -> str:
    """``report`` in ``fmt``, one of ``FORMATS`` (Markdown, CSV or JSON)."""
    if fmt == "json":
        return json.dumps(report.to_json(), indent=2, allow_nan=False) + "\n"
    if fmt == "csv":
        return render_csv(report)
    if fmt == "md":
        return render_markdown(report)
    raise ValueError(f"unknown report format {fmt!r}: use one of {', '.join(FORMATS)}")


# ---- People's formats -------------------------------------------------------------------------


def header_lines(report: BenchReport) -> list[str]:
    """Workload and machine: device, OS, python, torch (+CUDA), driver model, cores, timing."""
    m = report.to_json()["machine"]
    torch = f"torch {_text(m['torch'])}"
    if m["cuda"]:
        torch += f" (CUDA {m['cuda']})"
    cores = f", {m['cores']} cores" if m["cores"] else ""
    return [
        f"workload: {report.workload} · {report.to_json()['seconds_per_stage']} s per stage · "
        f"timing: {_text(m['timing'])}",
        f"device: {_text(m['device'])} ({_text(m['device_kind'])}{cores}) · "
        f"OS: {_text(m['os'])} · python {_text(m['python'])} · {torch} · "
        f"driver model: {_text(m['driver_model'])}",
    ]


def note_lines(report: BenchReport) -> list[str]:
    """The tour's story, what was reverted and skipped, and what the busy and coarse columns
    mean on this device."""
    lines = []
    if report.summary:
        lines.append(f"tour: {report.summary}")
    reverted = [
        str(s["label"]).removesuffix(f" — {REVERTED}")
        for s in report.segments
        if s.get("kept") is False
    ]
    if reverted:
        lines.append(
            "reverted (slower than the best configuration before them beyond noise; later "
            "stages build on the last kept one): " + ", ".join(reverted)
        )
    if report.skipped:
        lines.append(
            "skipped: " + "; ".join(f"{s['label']} ({s['reason']})" for s in report.skipped)
        )
    share = _finite(report.instrumentation_share)
    if share is not None:
        lines.append(
            f"gpuwatch's instrumentation: {share * 100:.2f} % of step time (its marks and "
            "their bookkeeping, as the runner timed them)"
        )
    if report.machine.get("device_kind") == "cuda":
        lines.append(
            "busy % is stream-active time from CUDA events (an upper bound); "
            "coarse % is NVML GPU utilization"
        )
    else:
        lines.append(
            "busy % is the share of time in compute phases (host timing); "
            "coarse % is the runner's CPU use"
        )
    return lines


def table_rows(report: BenchReport, *, for_csv: bool) -> list[list[str]]:
    """One row of cells per stage in ``HEADERS`` order, figures formatted for CSV or for
    Markdown."""
    rows = []
    for segment in (clean_segment(s) for s in report.segments):
        changed = describe_change(segment["changed"]) if segment["changed"] else ""
        cells = [str(segment["label"]), changed or ("" if for_csv else "—")]
        for _, key, md_format, csv_format in COLUMNS:
            cells.append(_figure(segment[key], csv_format if for_csv else md_format))
        rows.append(cells)
    return rows


def render_markdown(report: BenchReport) -> str:
    """The report for people: machine header, the stage table, notes, where the time goes, kernel
    windows and the advisor's findings."""
    out = [f"# gpuwatch bench: {report.workload}", ""]
    out += [f"- {line}" for line in header_lines(report)]
    out.append("")
    out.append("| " + " | ".join(HEADERS) + " |")
    out.append("|" + "|".join(["---", "---"] + ["---:"] * len(COLUMNS)) + "|")
    for cells in table_rows(report, for_csv=False):
        out.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    if not report.segments:
        out.append("| (nothing measured) |" + " |" * (len(HEADERS) - 1))
    out.append("")
    out += [f"- {line}" for line in note_lines(report)]
    why = why_lines(report)
    if why:
        out += ["", "## Where the time goes (ms per steady step)", ""]
        out += [f"- {line}" for line in why]
    kernels = [
        f"{s['label']}: {s['kernel_window']['text']}"
        for s in report.segments
        if isinstance(s.get("kernel_window"), Mapping)
    ]
    if kernels:
        out += ["", "## Kernel windows (profiled steps, left out of the figures above)", ""]
        out += [f"- {line}" for line in kernels]
    out += ["", "## Advisor", ""]
    out += [f"{i}. {line}" for i, line in enumerate(finding_lines(report), 1)] or [
        "- no finding: no stage was steady long enough"
    ]
    return "\n".join(out) + "\n"


def why_lines(report: BenchReport) -> list[str]:
    """Per measured segment: its step-time breakdown, then its idle time by cause."""
    lines = []
    kind = report.machine.get("device_kind")
    for segment in (clean_segment(s) for s in report.segments):
        split, idle = segment["breakdown"], segment["idle_causes"]
        if split is None or idle is None:
            continue
        lines.append(f"{segment['label']}: {summary(split, kind)}; {idle_summary(idle)}")
    return lines


def finding_lines(report: BenchReport) -> list[str]:
    """One line per finding: the sentence, its evidence and rule, what Apply would set."""
    lines = []
    for f in report.findings:
        knob = f" → set {describe_change(f['suggestion'])}" if f.get("suggestion") else ""
        lines.append(f"{f['title']} (evidence: {f['evidence']}; rule `{f['rule']}`){knob}")
    return lines


def render_csv(report: BenchReport) -> str:
    """One row per stage, idle causes and time categories in ms as extra columns; header, notes and
    findings go first as ``#`` comment lines."""
    buffer = io.StringIO()
    for line in (*header_lines(report), *note_lines(report)):
        buffer.write(f"# {line}\n")
    for line in finding_lines(report):
        buffer.write(f"# finding: {line}\n")
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(
        (*HEADERS, *(f"idle {c} ms" for c in CAUSES), *(f"{c} ms" for c in CATEGORIES), "kept")
    )
    for cells, segment in zip(
        table_rows(report, for_csv=True), (clean_segment(s) for s in report.segments), strict=True
    ):
        extra = []
        for key, names in _MS_DICT_KEYS.items():
            figures = segment[key]
            extra += [MISSING if figures is None else f"{figures[n]:.3f}" for n in names]
        kept = {True: "yes", False: "no"}.get(segment["kept"], MISSING)
        writer.writerow((*cells, *extra, kept))
    return buffer.getvalue()


def _finite(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and math.isfinite(value) else None


def _figure(value: float | None, fmt: str) -> str:
    if value is None:
        return MISSING
    if fmt.startswith("pct:"):
        return fmt[4:].format(value * 100.0)
    return fmt.format(value)


def _text(value: Any) -> str:
    return MISSING if value is None or value == "" else str(value)
