"""One word, one number: every busy figure on screen names the window it covers.

The headline's busy % (the last few seconds), the coarse-vs-fine comparison (the coarse
samples' own periods), the utilization plot (one value per coarse sample), the scoreboard
(a configuration's steady steps) and presentation mode's sentence are each right for their own
window; side by side they read as a contradiction unless each says which. The test finds every
visible widget whose text says "busy" in a window fed a simulated run (the stores written as
the link thread would: no runner, no GPU), at the desk and on stage, on a CPU device and on
CUDA with NVML, and asks that its text or the tooltip a user would see names a window. It
also holds docs/design.md's glossary to the captions on screen, word for word.
"""

from __future__ import annotations

import html
import re
from pathlib import Path

import numpy as np
import pytest
from PySide6.QtWidgets import QAbstractButton, QAbstractItemView, QLabel, QWidget

from gpuwatch.core.figures.frame import HEADLINE_WINDOW_S, HeadlineFigures
from gpuwatch.core.model.store import MetricStatus
from gpuwatch.core.run.session import Session
from gpuwatch.qt.headline_bar import DASH
from gpuwatch.qt.presentation import presentation_detail, presentation_sentence

MS = 1_000_000
S = 1_000_000_000
#: One 100 ms step: data 30 ms, h2d 5, forward 20, backward 30, optimizer 10, sync 4, other 1.
PHASE_MS = (30, 5, 20, 30, 10, 4)
STEP_MS = 100
N_STEPS = 120
WAIT_MS = 10_000
GLOSSARY = Path(__file__).resolve().parents[1] / "docs" / "design.md"

#: Words that name a window, as the screen says them.
WINDOW_WORDS = re.compile(
    r"\blast \d+(?:\.\d+)? s\b"  # the headline, presentation mode
    r"|\bsame periods as the (?:coarse|runner CPU|NVML) samples\b"  # coarse vs fine, the plot
    r"|\bthis configuration, steady steps\b"  # the scoreboard
    r"|\beach rank's newest [\d,]+ steps\b"  # the Ranks tab
)
#: A busy figure's name: "stream active" is CUDA's (a figure: followed by a % or a number; the
#: timeline's "CUDA stream active" lane legend names spans, not a figure).
BUSY_WORDS = re.compile(r"busy|stream active\s*(?:%|\d|—)", re.IGNORECASE)
_TAG = re.compile(r"<[^>]+>")


def _feed(session: Session, device: str) -> None:
    """``N_STEPS`` steps of 100 ms from t0 + 0.5 s and coarse samples over the same time:
    runner CPU at 150% in 1 s periods on a CPU, NVML at 80% in 1/6 s periods on CUDA."""
    t0 = session.t0_ns
    # As the runner's hello arrives: it also opens configuration 0, the scoreboard's first row.
    session.model.fold(
        {"kind": "hello", "workload": "vision", "device": {"kind": device, "name": "simulated"}}
    )
    starts = t0 + S // 2 + np.arange(N_STEPS, dtype=np.int64) * STEP_MS * MS
    marks = starts[:, None] + (np.concatenate(([0], np.cumsum(PHASE_MS))) * MS)[None, :]
    ids = list(range(N_STEPS))
    if device == "cpu":
        session.steps.set_device_is_host(True)
    session.steps.append(ids, [0] * N_STEPS, [32] * N_STEPS, marks.tolist())
    if device == "cuda":
        session.steps.set_device_marks(ids, (marks + 2 * MS).tolist())
        metric, label, period, value = "nvml.gpu_util", "NVML GPU utilization", S // 6, 80.0
    else:
        metric, label, period, value = "proc.cpu", "runner CPU", S, 150.0
    session.coarse.set_status(MetricStatus(metric, label, "%", True, period_s=period / S))
    k = np.arange((N_STEPS * STEP_MS * MS) // period + 2, dtype=np.int64)
    session.coarse.append_many(
        metric, (t0 + k * period).tolist(), (t0 + (k + 1) * period).tolist(), [value] * len(k)
    )


def _tooltip_seen(widget: QWidget) -> str:
    """The tooltip Qt shows over ``widget``: its own, else its nearest ancestor's."""
    while widget is not None:
        if widget.toolTip():
            return widget.toolTip()
        widget = widget.parentWidget()
    return ""


def _says_busy(text: str) -> bool:
    return BUSY_WORDS.search(text) is not None


def busy_texts(root: QWidget) -> list[tuple[str, str]]:
    """(visible text, tooltip seen) of every visible widget or table header whose text says
    "busy" (or "stream active")."""
    found: list[tuple[str, str]] = []
    for w in [root, *root.findChildren(QWidget)]:
        if not w.isVisible():
            continue
        if isinstance(w, (QLabel, QAbstractButton)):
            text = html.unescape(_TAG.sub(" ", w.text()))
            if _says_busy(text):
                found.append((text, _tooltip_seen(w)))
        if isinstance(w, QAbstractItemView) and w.model() is not None:
            model, header = w.model(), getattr(w, "horizontalHeader", lambda: None)()
            if header is None or not header.isVisible():
                continue
            for i in range(model.columnCount()):
                title = str(model.headerData(i, header.orientation()) or "")
                if _says_busy(title) and not header.isSectionHidden(i):
                    tip = model.headerData(i, header.orientation(), role=3)  # ToolTipRole
                    found.append((title, str(tip or "")))
    return found


def unnamed_windows(root: QWidget) -> list[tuple[str, str]]:
    return [(t, tip) for t, tip in busy_texts(root) if not WINDOW_WORDS.search(f"{t}\n{tip}")]


@pytest.fixture(params=["cpu", "cuda"])
def fed_window(request, show_window, qtbot, light):
    win = show_window(Session(sample_coarse=False))
    _feed(win.session, request.param)
    head = win.headline

    def figures_shown() -> None:
        assert head.busy.value.text() != DASH
        assert head.difference.value.text() != DASH
        assert win.scoreboard.table.model().rowCount() > 0

    qtbot.waitUntil(figures_shown, timeout=WAIT_MS)
    return win


def test_every_busy_figure_on_screen_names_its_window(fed_window, qtbot):
    win = fed_window
    found = busy_texts(win)
    assert len(found) >= 3, found  # the headline's busy, coarse vs fine, the plot's legend
    assert not unnamed_windows(win)

    win.presentation.set_active(True, fullscreen=False)
    big = win.presentation.big_headline
    qtbot.waitUntil(lambda: _says_busy(big.text()), timeout=WAIT_MS)
    assert any(text.startswith("last 5 s: ") for text, _ in busy_texts(win))  # the big sentence
    assert not unnamed_windows(win)
    win.presentation.set_active(False)


def test_the_headline_says_which_window_and_unit(fed_window):
    head = fed_window.headline
    cuda = fed_window.session.hello.device.kind == "cuda"
    fine = "stream active" if cuda else "compute busy"
    assert head.busy.caption.text() == f"{fine} %, last 5 s"
    assert head.coarse.caption.text() == ("NVML util %" if cuda else "runner CPU, % of one core")
    assert head.difference.caption.text() == "coarse vs fine, same periods, last 5 s"
    coarse = "NVML" if cuda else "runner CPU"
    assert f"the same periods as the {coarse} samples in the last 5 s" in head.difference.toolTip()
    if not cuda:
        assert head.difference.value.text() == "runner CPU says 150% of one core, compute busy 65%"


def test_the_stage_sentence_names_window_and_unit():
    cpu = HeadlineFigures(
        window_s=5.0, busy_pct=41.2, coarse_pct=97.0, coarse_short="runner CPU", device_kind="cpu"
    )
    assert presentation_sentence(cpu) == "last 5 s: compute busy 41% · runner CPU says 97%"
    assert presentation_detail(cpu).endswith(" · runner CPU in % of one core")
    fast = HeadlineFigures(window_s=0.8, busy_pct=41.0, coarse_pct=None, device_kind="cuda")
    assert presentation_sentence(fast) == "last 0.8 s: stream active 41% · NVML says —"
    assert "core" not in presentation_detail(fast)


def test_the_glossary_matches_the_screen_word_for_word(fed_window):
    """docs/design.md's glossary quotes every busy caption the window shows."""
    text = GLOSSARY.read_text(encoding="utf-8")
    glossary = text[text.index("## Glossary") :]
    assert HEADLINE_WINDOW_S == 5.0  # the captions below are quoted at the default window
    head = fed_window.headline
    shown = [
        head.busy.caption.text(),
        head.coarse.caption.text(),
        head.difference.caption.text(),
        *fed_window.utilization.legend_texts(),
    ]
    example = HeadlineFigures(
        window_s=5.0,
        busy_pct=41.0,
        coarse_pct=97.0,
        coarse_short=head.figures.coarse_short,
        device_kind=head.figures.device_kind,
    )
    shown.append(presentation_sentence(example))  # the stage's sentence, with example figures
    missing = [s for s in shown if f"`{s}`" not in glossary]
    assert not missing, f"not quoted in the glossary: {missing}"
