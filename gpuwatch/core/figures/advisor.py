"""The advisor: ranked, plain-language findings from the segment figures, each tied to a knob.

Every rule reads one measured quantity of the newest steady segment (or compares it with
the segment before it), fires above a documented threshold, and suggests the knob and value
that address it — only knobs and choices the runner reports usable here (``check_usable``),
never a disabled one. The rules, thresholds and reasons are listed in one place, the
``RULES`` table below, which docs/advisor.md mirrors. Pure functions of plain data: the
window, ``gpuwatch bench`` and the tests all get the same findings.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import numpy as np

from gpuwatch.core.figures.kernel_window import KernelWindow, WindowSummary
from gpuwatch.core.figures.rank_figures import (
    RULE_QUANTITY,
    RankFigures,
    Straggler,
    find_straggler,
)
from gpuwatch.core.figures.segments import SegmentStats
from gpuwatch.core.figures.speed_noise import noise_band
from gpuwatch.core.model.knob_values import KnobValueError, check_usable, schema_by_name
from gpuwatch.core.model.messages import ConfigChange, Hello, format_value

#: Comparisons between segments need at least this many 1 s window rates on each side.
MIN_WINDOWS = 2


@dataclass(frozen=True)
class Rule:
    """One row of the rule table (docs/advisor.md)."""

    id: str
    quantity: str
    threshold: str
    knob: str
    why: str


RULES: tuple[Rule, ...] = (
    Rule(
        "change-worse",
        "samples/s of the newest segment ÷ the segment before it",
        "< 1 − noise (twice the two medians' uncertainty, 5–10 %: the tour's rule)",
        "the previous values of the knobs it changed (revert)",
        "a change that costs throughput beyond noise should be undone",
    ),
    Rule(
        "change-outcome",
        "samples/s ratio, and the quantity the applied finding was about, before → after",
        "newest segment steady (≥ 2 window rates)",
        "—",
        "after a change, say what it measurably did",
    ),
    Rule(
        "input-bound",
        "device idle while the host waits for the next batch ÷ step time",
        "≥ 20 %, num_workers below min(cores, its max)",
        "num_workers = min(cores, max) "
        "(a watched script without that knob: the same advice, for its own DataLoader)",
        "worker processes prepare batches while the model trains",
    ),
    Rule(
        "storage-latency",
        "input wait share, with storage_latency_ms > 0 and workers ≥ cores",
        "≥ 20 %",
        "num_workers = min(2 × current, max)",
        "a worker waiting on storage sleeps: more workers than cores hide I/O latency",
    ),
    Rule(
        "input-cpu-bound",
        "input wait share with workers ≥ cores and no storage latency",
        "≥ 20 %",
        "none (cheaper decode/augmentation, or more cores)",
        "every core already prepares batches; a knob cannot add CPU",
    ),
    Rule(
        "sync-bound",
        "host time in the sync phase (.item(), logging) ÷ step time",
        "≥ 10 %, log_every < 50",
        "log_every = 50 (a watched script: read the loss every 50 steps)",
        "each .item() waits for the device queue to drain, so the host cannot run ahead",
    ),
    Rule(
        "copy-bound",
        "copy time (device copy span + host issuing copies) ÷ step time",
        "≥ 10 % (CUDA)",
        "pin_memory = on, non_blocking = on",
        "page-locked batches copy asynchronously, overlapping compute",
    ),
    Rule(
        "launch-bound",
        "device idle while the host runs forward/backward/optimizer ÷ step",
        "≥ 15 %",
        "compile = reduce-overhead (CUDA graphs) on CUDA, else compile = default, "
        "else batch_size × 2",
        "fewer, larger launches: fused kernels, graphs, bigger batches",
    ),
    Rule(
        "precision",
        "device busy (kernel) share of the step, on CUDA with amp off",
        "≥ 70 %",
        "amp = bf16 (fp16 where bf16 is not usable)",
        "a device-bound loop gains from 16-bit matmuls and convolutions (tensor cores)",
    ),
    Rule(
        "channels-last",
        "device busy share with AMP on and channels_last off",
        "≥ 50 %",
        "channels_last = on (vision)",
        "NHWC lets mixed-precision convolutions pick faster kernels",
    ),
    Rule(
        "capture-kernel-wait",
        "kernel capture (CUDA): HTA kernel wait (gaps under 30 µs "
        "between back-to-back kernels launched in time) ÷ window",
        "≥ 10 %",
        "compile = reduce-overhead (CUDA graphs), else default",
        "launch overhead between many small kernels: graphs replay them in one launch",
    ),
    Rule(
        "capture-underfilled",
        "kernel capture (CUDA): busy time in kernels with < 1 block per SM ÷ busy time",
        "≥ 50 %",
        "batch_size × 2",
        "a kernel with fewer blocks than SMs cannot fill the GPU; bigger batches give more",
    ),
    Rule(
        "device-bound",
        "device idle (all causes) ÷ step time",
        "< 10 %",
        "—",
        "nothing in the input, sync or launch path is holding the device back",
    ),
    Rule(
        "straggler",
        "each rank's input wait, forward, backward and step p50 against the other ranks' "
        "median (a run of many ranks; their newest steps)",
        "input wait ≥ 15 points above and ≥ 2× the others'; forward ≥ 1.25× and 10 % of a "
        "step longer; the others' backward (their all-reduce wait) 10 % of a step longer than "
        "its own; or step ≥ 1.15×",
        "none (that rank's input pipeline or device: more DataLoader workers, faster storage, "
        "a less busy GPU)",
        "DDP all-reduces every step, so every rank waits for the slowest one",
    ),
)
RULE_IDS = tuple(r.id for r in RULES)
#: The "why" column of ``RULES`` by rule id: the one-line reason a card shows under a finding.
RULE_WHY = {r.id: r.why for r in RULES}

INPUT_SHARE = 0.20
SYNC_SHARE = 0.10
COPY_SHARE = 0.10
LAUNCH_SHARE = 0.15
PRECISION_BUSY = 0.70
CHANNELS_LAST_BUSY = 0.50
IDLE_OK = 0.10
KERNEL_WAIT_SHARE = 0.10
UNDERFILLED_SHARE = 0.50
BATCHED_LOG_EVERY = 50


@dataclass(frozen=True)
class Finding:
    """One piece of advice: what was measured, how much, and what to flip."""

    rule: str
    kind: str  # "fix" | "ok" | "worse" | "outcome"
    title: str
    evidence: str
    quantity: str
    value: float | None
    suggestion: dict[str, Any] = field(default_factory=dict)
    impact: float = 0.0
    config_id: int | None = None

    @property
    def why(self) -> str:
        """Why the suggested knob addresses the measured quantity (``RULES``' "why")."""
        return RULE_WHY.get(self.rule, "")

    @property
    def apply_text(self) -> str:
        """``"num_workers=2"`` — what the Apply button sends."""
        return ", ".join(f"{k}={format_value(v)}" for k, v in self.suggestion.items())

    def to_json(self) -> dict[str, Any]:
        value = self.value if self.value is None or np.isfinite(self.value) else None
        return {
            "rule": self.rule,
            "kind": self.kind,
            "title": self.title,
            "evidence": self.evidence,
            "quantity": self.quantity,
            "value": value,
            "suggestion": dict(self.suggestion),
        }


@dataclass(frozen=True)
class Context:
    """What the rules need beyond the figures: the knob schema and the machine."""

    knobs: Sequence[Mapping[str, Any]] = ()
    values: Mapping[str, Any] = field(default_factory=dict)
    device_kind: str | None = None
    cores: int | None = None
    #: The newest kernel capture window taken under the configuration in force, if any.
    capture: WindowSummary | None = None
    #: A run of many ranks: the rank holding the others back, if one stands out.
    straggler: Straggler | None = None


class AdvisedRun(Protocol):
    """What the advisor reads of a run: a Session, a replay or a test's stand-in."""

    @property
    def hello(self) -> Hello | None: ...

    @property
    def knobs(self) -> Sequence[Mapping[str, Any]]: ...

    def config_values(self) -> Mapping[str, Any]: ...

    def config_changes(self) -> Sequence[ConfigChange]: ...


@runtime_checkable
class RankedRun(Protocol):
    """A run whose ranks can be read (a Session, a replay); none for a test's stand-in."""

    def rank_figures(self, last: int | None = ...) -> Sequence[RankFigures]: ...


@runtime_checkable
class CapturingRun(Protocol):
    """A run that keeps kernel capture windows (a test's stand-in may keep none)."""

    def kernel_windows(self) -> Sequence[KernelWindow]: ...


def context_of(session: AdvisedRun) -> Context:
    """The advisor's context from a Session (or a replay: the same public API)."""
    device = session.hello.device if session.hello else None
    cores = device.cores if device else None
    return Context(
        knobs=session.knobs,
        values=session.config_values(),
        device_kind=device.kind if device else None,
        cores=cores if isinstance(cores, int) and cores > 0 else None,
        capture=_current_capture(session),
        straggler=find_straggler(session.rank_figures())
        if isinstance(session, RankedRun)
        else None,
    )


def _current_capture(session: AdvisedRun) -> WindowSummary | None:
    """The newest capture window taken after the newest configuration change (a session
    that cannot capture, such as a test's stand-in, has none)."""
    changes = session.config_changes()
    if not isinstance(session, CapturingRun) or not changes:
        return None
    since = changes[-1].t_ns
    current = [w for w in session.kernel_windows() if w.ok and w.t0_ns >= since]
    return current[-1].summary() if current else None


# ---- Measured quantities -----------------------------------------------------------------


def step_ms(row: SegmentStats) -> float | None:
    """Mean step time of the breakdown (it sums to the wall time)."""
    if not row.breakdown:
        return None
    total = sum(row.breakdown.values())
    return total if total > 0 else None


def share(row: SegmentStats, quantity: str) -> float | None:
    """A named quantity of a segment as a share of its mean step time (see ``RULES``)."""
    total = step_ms(row)
    if total is None or row.idle_causes is None or row.breakdown is None:
        return None
    idle = row.idle_causes
    ms = {
        "input wait": idle.get("input", 0.0),
        "sync": (row.host_phases or {}).get("sync", 0.0),
        "copy": row.breakdown.get("memcpy", 0.0),
        "launch gaps": idle.get("launch", 0.0),
        "device busy": row.breakdown.get("kernel", 0.0),
        "device idle": sum(idle.values()),
    }.get(quantity)
    return None if ms is None else ms / total


def _pct(value: float) -> str:
    return f"{100 * value:.0f}%"


# ---- Rules ----------------------------------------------------------------------------------


class _Knobs:
    """Current values and what may be suggested here."""

    def __init__(self, ctx: Context) -> None:
        self.schema = schema_by_name(ctx.knobs)
        self.values = dict(ctx.values)

    def usable(self, name: str, value: Any) -> bool:
        knob = self.schema.get(name)
        if knob is None:
            return False
        try:
            check_usable(knob, value)
        except KnobValueError:
            return False
        choices = knob.get("choices")
        if choices and value not in choices:
            return False
        return not isinstance(knob.get("max"), int | float) or value <= knob["max"]

    def get(self, name: str, default: Any = None) -> Any:
        return self.values.get(name, default)

    def clamp(self, name: str, value: int) -> int:
        top = self.schema.get(name, {}).get("max")
        return min(value, int(top)) if isinstance(top, int | float) else value

    def changes(self, wanted: Mapping[str, Any]) -> dict[str, Any]:
        """The usable part of ``wanted`` that differs from the values in force."""
        return {k: v for k, v in wanted.items() if self.usable(k, v) and self.values.get(k) != v}


def _fix(  # noqa: PLR0917
    rule: str,
    title: str,
    quantity: str,
    value: float,
    suggestion: dict[str, Any],
    row: SegmentStats,
    extra: str = "",
) -> Finding:
    evidence = f"{quantity}: {_pct(value)} of each step ({row.label})" + extra
    return Finding(rule, "fix", title, evidence, quantity, value, suggestion, value, row.config_id)


def _input_rules(row: SegmentStats, knobs: _Knobs, ctx: Context) -> list[Finding]:
    wait = share(row, "input wait")
    if wait is None or wait < INPUT_SHARE:
        return []
    workers = knobs.get("num_workers")
    cores = ctx.cores or 1
    head = f"{_pct(wait)} of each step waits for input"
    machine = f"this machine has {cores} core{'s' * (cores != 1)}"
    if "num_workers" not in knobs.schema:  # a watched script: the fix is in its code
        return [
            _fix(
                "input-bound",
                f"{head}: give your DataLoader num_workers={cores} ({machine})",
                "input wait",
                wait,
                {},
                row,
            )
        ]
    if isinstance(workers, int):
        target = knobs.clamp("num_workers", cores)
        if workers < target and knobs.usable("num_workers", target):
            return [
                _fix(
                    "input-bound",
                    f"{head}; try num_workers={target} ({machine})",
                    "input wait",
                    wait,
                    {"num_workers": target},
                    row,
                )
            ]
        latency = knobs.get("storage_latency_ms")
        if isinstance(latency, int | float) and latency > 0:
            more = knobs.clamp("num_workers", max(2 * workers, workers + 1))
            if more > workers and knobs.usable("num_workers", more):
                return [
                    _fix(
                        "storage-latency",
                        f"{head}: each sample waits {latency:g} ms on storage; "
                        f"try num_workers={more} (waiting workers use no core)",
                        "input wait",
                        wait,
                        {"num_workers": more},
                        row,
                        f"; storage_latency_ms = {latency:g}",
                    )
                ]
        if workers >= cores:
            return [
                _fix(
                    "input-cpu-bound",
                    f"{head} although {workers} workers use all {cores} cores: the "
                    f"input pipeline needs less CPU per sample (decode, augmentation) "
                    f"or more cores",
                    "input wait",
                    wait,
                    {},
                    row,
                )
            ]
    return []


def _loop_rules(row: SegmentStats, knobs: _Knobs, ctx: Context) -> list[Finding]:
    out = []
    sync = share(row, "sync")
    log_every = knobs.get("log_every")
    if sync is not None and sync >= SYNC_SHARE and "log_every" not in knobs.schema:
        out.append(
            _fix(
                "sync-bound",
                f"{_pct(sync)} of each step is spent in .item()/"
                f"logging syncs: read the loss every {BATCHED_LOG_EVERY} steps "
                f"instead of every step",
                "sync",
                sync,
                {},
                row,
            )
        )
    elif (
        sync is not None
        and sync >= SYNC_SHARE
        and isinstance(log_every, int)
        and log_every < BATCHED_LOG_EVERY
    ):
        value = knobs.clamp("log_every", BATCHED_LOG_EVERY)
        if knobs.usable("log_every", value):
            out.append(
                _fix(
                    "sync-bound",
                    f"{_pct(sync)} of each step is spent in .item()/"
                    f"logging syncs; try log_every={value}",
                    "sync",
                    sync,
                    {"log_every": value},
                    row,
                )
            )
    copy = share(row, "copy")
    if ctx.device_kind == "cuda" and copy is not None and copy >= COPY_SHARE:
        wanted = knobs.changes({"pin_memory": True, "non_blocking": True})
        if wanted:
            what = ", ".join(f"{k}=on" for k in wanted)
            out.append(
                _fix(
                    "copy-bound",
                    f"{_pct(copy)} of each step copies batches to the GPU; try {what}",
                    "copy",
                    copy,
                    wanted,
                    row,
                )
            )
    launch = share(row, "launch gaps")
    if launch is not None and launch >= LAUNCH_SHARE:
        wanted = {}
        if knobs.get("compile", "off") == "off":
            for mode in (
                ("reduce-overhead", "default") if ctx.device_kind == "cuda" else ("default",)
            ):
                if knobs.usable("compile", mode):
                    wanted = {"compile": mode}
                    break
        batch = knobs.get("batch_size")
        if not wanted and isinstance(batch, int):
            bigger = knobs.clamp("batch_size", 2 * batch)
            if bigger > batch and knobs.usable("batch_size", bigger):
                wanted = {"batch_size": bigger}
        if wanted:
            how = {"reduce-overhead": " (CUDA graphs)"}.get(wanted.get("compile", ""), "")
            out.append(
                _fix(
                    "launch-bound",
                    f"the device idles {_pct(launch)} of each step "
                    f"while the host launches work; try "
                    f"{', '.join(f'{k}={v}' for k, v in wanted.items())}{how}",
                    "launch gaps",
                    launch,
                    wanted,
                    row,
                )
            )
    return out


def _device_rules(row: SegmentStats, knobs: _Knobs, ctx: Context) -> list[Finding]:
    out: list[Finding] = []
    busy = share(row, "device busy")
    idle = share(row, "device idle")
    if busy is None or idle is None:
        return out
    amp = knobs.get("amp")
    if ctx.device_kind == "cuda" and busy >= PRECISION_BUSY and amp == "off":
        choice = next((c for c in ("bf16", "fp16") if knobs.usable("amp", c)), None)
        if choice is not None:
            out.append(
                _fix(
                    "precision",
                    f"the GPU is busy {_pct(busy)} of each step: try "
                    f"amp={choice} (16-bit matmuls on tensor cores)",
                    "device busy",
                    busy,
                    {"amp": choice},
                    row,
                )
            )
    if (
        amp not in (None, "off")
        and busy >= CHANNELS_LAST_BUSY
        and knobs.get("channels_last") is False
        and knobs.usable("channels_last", True)
    ):
        out.append(
            _fix(
                "channels-last",
                f"with AMP on the device is busy {_pct(busy)} of each step: try channels_last=on",
                "device busy",
                busy,
                {"channels_last": True},
                row,
            )
        )
    if idle < IDLE_OK:
        bound = (
            "device-bound (the GPU is busy"
            if ctx.device_kind == "cuda"
            else "compute-bound (it computes"
        )
        out.append(
            Finding(
                "device-bound",
                "ok",
                f"Nothing is wrong: the loop is {bound} {_pct(busy)} of each "
                f"step, idle {_pct(idle)})",
                f"device idle: {_pct(idle)} of each step ({row.label})",
                "device idle",
                idle,
                {},
                0.0,
                row.config_id,
            )
        )
    return out


def _capture_rules(row: SegmentStats, knobs: _Knobs, ctx: Context) -> list[Finding]:
    """HTA's categories and launch geometry from a kernel capture (CUDA only: on a CPU every
    gap between ops is host wait by definition, which the phase rules already cover)."""
    cap = ctx.capture
    if cap is None or ctx.device_kind != "cuda" or not cap.window_ns:
        return []
    out = []
    wait = cap.idle.kernel_wait_ns / cap.window_ns
    if wait >= KERNEL_WAIT_SHARE and knobs.get("compile", "off") == "off":
        mode = next((m for m in ("reduce-overhead", "default") if knobs.usable("compile", m)), None)
        if mode is not None:
            out.append(
                Finding(
                    "capture-kernel-wait",
                    "fix",
                    f"In the kernel capture the GPU waits {_pct(wait)} of the time between "
                    f"back-to-back kernels (launch overhead); try compile={mode}"
                    + (" (CUDA graphs)" if mode == "reduce-overhead" else ""),
                    f"kernel wait: {cap.idle.kernel_wait_ns / 1e6:.2f} ms of a "
                    f"{cap.window_ns / 1e6:.1f} ms capture window ({row.label})",
                    "kernel wait",
                    wait,
                    {"compile": mode},
                    wait,
                    row.config_id,
                )
            )
    under = cap.underfilled_busy_share
    batch = knobs.get("batch_size")
    if under is not None and under >= UNDERFILLED_SHARE and isinstance(batch, int):
        bigger = knobs.clamp("batch_size", 2 * batch)
        if bigger > batch and knobs.usable("batch_size", bigger):
            out.append(
                Finding(
                    "capture-underfilled",
                    "fix",
                    f"{_pct(under)} of GPU busy time runs kernels with fewer blocks than SMs (they "
                    f"cannot fill the GPU); try batch_size={bigger}",
                    f"under-filled kernels: {cap.underfilled} of {cap.geometry_known} with launch "
                    f"geometry, {_pct(under)} of busy time ({row.label})",
                    "under-filled kernels",
                    under,
                    {"batch_size": bigger},
                    under / 2,
                    row.config_id,
                )
            )
    return out


def _describe_move(before: SegmentStats, after: SegmentStats) -> str:
    """``"num_workers 0→2"`` for the knobs the later segment changed."""
    parts = [
        f"{k} {format_value(before.settings.get(k))}→{format_value(v)}"
        for k, v in after.changed.items()
    ]
    return ", ".join(parts) or after.label


def change_findings(
    before: SegmentStats, after: SegmentStats, knobs: _Knobs, about: str | None = None
) -> list[Finding]:
    """What the newest change did: "made worse, revert?" or the measured outcome."""
    if (
        before.samples_per_s is None
        or after.samples_per_s is None
        or len(before.window_rates) < MIN_WINDOWS
        or len(after.window_rates) < MIN_WINDOWS
        or before.samples_per_s <= 0
    ):
        return []
    ratio = after.samples_per_s / before.samples_per_s
    noise = noise_band(after, before)
    move = _describe_move(before, after)
    evidence = (
        f"samples/s {before.samples_per_s:,.0f} → {after.samples_per_s:,.0f} "
        f"({before.label} → {after.label}; noise ±{_pct(noise)})"
    )
    if ratio < 1 - noise:
        revert = knobs.changes(
            {k: before.settings[k] for k in after.changed if k in before.settings}
        )
        return [
            Finding(
                "change-worse",
                "worse",
                f"This change made things worse: {move} cost {_pct(1 - ratio)} of "
                f"samples/s" + ("; revert?" if revert else ""),
                evidence,
                "samples/s ratio",
                ratio,
                revert,
                2.0 + (1 - ratio),
                after.config_id,
            )
        ]
    detail = ""
    quantity = about
    if quantity is None:  # the idle cause that moved most tells what the change did
        moves = {
            q: (share(before, q), share(after, q))
            for q in ("input wait", "sync", "copy", "launch gaps", "device idle")
        }
        known = {q: abs(b - a) for q, (b, a) in moves.items() if a is not None and b is not None}
        quantity = max(known, key=known.get) if known else None  # type: ignore[arg-type]
    if quantity is not None:
        b, a = share(before, quantity), share(after, quantity)
        if a is not None and b is not None:
            detail = f"; {quantity} {_pct(b)}→{_pct(a)}"
    verdict = (
        f"{ratio:.2f}× samples/s"
        if ratio > 1 + noise
        else f"no measurable change in samples/s ({ratio:.2f}×, within noise)"
    )
    return [
        Finding(
            "change-outcome",
            "outcome",
            f"{move}: {verdict}{detail}",
            evidence,
            "samples/s ratio",
            ratio,
            {},
            1.5,
            after.config_id,
        )
    ]


def advise(
    rows: Sequence[SegmentStats], ctx: Context, applied: Mapping[int, str] | None = None
) -> list[Finding]:
    """Ranked findings for the newest segment (empty until it is steady over at least
    ``MIN_WINDOWS`` rate windows: whatever it offers to apply must leave a baseline that the
    change can be measured against).

    ``applied`` maps a config id to the quantity of the finding whose Apply created it, so
    its outcome reports that quantity before → after. Ranking: a change that made things
    worse first, then what the newest change did, then fixes by the share of the step at
    stake, then "nothing is wrong".
    """
    steady = [
        r
        for r in rows
        if r.steady and r.breakdown is not None and len(r.window_rates) >= MIN_WINDOWS
    ]
    if not rows or not steady or steady[-1].config_id != rows[-1].config_id:
        return []
    latest = steady[-1]
    knobs = _Knobs(ctx)
    findings: list[Finding] = []
    index = next(i for i, r in enumerate(rows) if r.config_id == latest.config_id)
    if index > 0 and latest.changed:
        findings += change_findings(
            rows[index - 1], latest, knobs, (applied or {}).get(latest.config_id)
        )
    findings += _input_rules(latest, knobs, ctx)
    findings += _loop_rules(latest, knobs, ctx)
    findings += _device_rules(latest, knobs, ctx)
    findings += _capture_rules(latest, knobs, ctx)
    if ctx.straggler is not None:  # "nothing is wrong" on rank 0 hides that it waits
        findings = [f for f in findings if f.kind != "ok"] + _rank_rules(ctx)
    return sorted(findings, key=lambda f: -f.impact)


def _rank_rules(ctx: Context) -> list[Finding]:
    """The straggler of a run of many ranks: first among fixes (every rank runs at its pace)."""
    found = ctx.straggler
    if found is None:
        return []
    return [
        Finding(
            rule="straggler",
            kind="fix",
            title=f"Rank {found.rank} holds the other ranks back",
            evidence=found.sentence,
            quantity=RULE_QUANTITY[found.rule],
            value=None,
            impact=1.0,
        )
    ]
