"""The knob panel: one editor per knob of the runner's schema, grouped, live.

Built from ``session.knobs`` (docs/knobs.md §2) and rebuilt when a new run's hello arrives.
Editors show the values *in force* (``session.config_values()``, the latest applied
configuration), whoever changed them: this panel, the advisor's Apply, the tour, ``--set`` or a
replayed recording. A refused change snaps back by itself; the panel only remembers which
requests are still unanswered and which numeric fields hold a draft. A draft lasts until it is
applied or the running value changes under it (then the new running value wins: a stale draft
with its Apply enabled would undo another's change in one click).

Numeric knobs are edited as a draft and applied on Enter, when the field loses focus, or with
the row's "Apply" button: arrows and the mouse wheel only change the draft. Each change
rebuilds something (a loader, a compiled model), so applying every arrow tick would start a
rebuild per tick and fill the scoreboard with half-measured segments. Check boxes and choice
lists are single deliberate clicks and apply at once.
"""

from __future__ import annotations

import html
from typing import Any

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QStandardItemModel
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QDoubleSpinBox,
    QGridLayout,
    QLabel,
    QScrollArea,
    QSpinBox,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from gpuwatch.core.figures.segments import SegmentStats
from gpuwatch.core.model.messages import ConfigChange, Refusal, format_value
from gpuwatch.core.run.session import SessionError, SessionState
from gpuwatch.qt import palette
from gpuwatch.qt.run_session import RunSession
from gpuwatch.qt.theme_tokens import Role

GROUP_TITLES = {
    "loader": "Loader",
    "copies": "Copies",
    "precision": "Precision",
    "layout": "Layout",
    "kernels": "Kernels",
    "loop": "Loop",
    "demo": "Demo dials",
}
HINT_NO_RUN = "Start a run to see its knobs."
HINT_STARTING = "Waiting for the runner's knobs…"
HINT_ENDED = "The run has ended: knobs apply to a running run. Start a new one to change them."
INT_LIMIT = 2**31 - 1
#: Width of the panel before any knob is known (then: its widest row).
MIN_WIDTH = 260
_SMALL = "font-size: 11px;"
#: A row that has shown no running value yet.
_NOT_SHOWN = object()


def _same(a: Any, b: Any) -> bool:
    """Equal as knob values, as the Session compares them: 2 == 2.0, but True is not 1."""
    return a == b and isinstance(a, bool) == isinstance(b, bool)


def cost_text(name: str, change: ConfigChange, row: SegmentStats | None) -> str:
    """What a knob's last change cost, e.g. "loader rebuilt in 2.1 s", "compiled in 41.0 s"."""
    if name == "compile" and change.changed.get(name) not in (None, "off"):
        what = "compiled"
    elif change.rebuilt:
        what = " + ".join(change.rebuilt) + " rebuilt"
    else:
        what = "applied"
    if row is None or row.transition_s is None:
        return f"{what}; transition running…"
    return f"{what} in {row.transition_s:.1f} s"


class KnobRow:
    """The widgets of one knob: label, editor, optional Apply button, note and cost lines."""

    def __init__(self, knob: dict[str, Any], panel: KnobPanel) -> None:
        self.knob = knob
        self.name: str = knob["name"]
        self.kind: str = knob.get("type", "")
        self.enabled_here = bool(knob.get("enabled", True))
        label_text = knob.get("label") or self.name
        self.label = QLabel(label_text)
        self.label.setTextFormat(Qt.TextFormat.PlainText)
        self.label.setWordWrap(True)  # long labels take two lines, not a wider dock
        tip = knob.get("help") or ""
        rebuilds = knob.get("rebuilds")
        tip += f"\n\n{self.name}" + (f" — changing it rebuilds the {rebuilds}" if rebuilds else "")
        self.label.setToolTip(tip.strip())
        self.apply_button: QToolButton | None = None
        #: The running value the editor last showed, and whether the user edited it since
        #: (a numeric draft waiting for Enter or Apply).
        self.shown: Any = _NOT_SHOWN
        self.draft = False
        self.editor = self._build_editor(panel)
        self.editor.setToolTip(tip.strip())
        self.note = QLabel()
        self.note.setTextFormat(Qt.TextFormat.PlainText)
        self.note.setWordWrap(True)
        palette.set_style(self.note, f"color: $note_text; {_SMALL}")
        notes = []
        if not self.enabled_here:
            notes.append(knob.get("reason") or "not available here")
        for choice, reason in (knob.get("disabled_choices") or {}).items():
            notes.append(f"{choice}: {reason}")
        for choice, reason in (knob.get("slow_choices") or {}).items():  # offered, but slower
            notes.append(f"{choice}: {reason}")
        self.note.setText("; ".join(notes))
        self.note.setVisible(bool(notes))
        self.cost = QLabel()
        self.cost.setTextFormat(Qt.TextFormat.PlainText)
        palette.set_style(self.cost, f"color: $cost_text; {_SMALL}")
        self.cost.hide()
        if not self.enabled_here:
            self.label.setEnabled(False)

    def _build_editor(self, panel: KnobPanel) -> QWidget:
        knob, name = self.knob, self.name
        if self.kind == "bool":
            box = QCheckBox()
            box.toggled.connect(lambda on: panel.request(name, bool(on)))
            return box
        if self.kind == "choice":
            combo = QComboBox()
            # Narrow when closed (the popup still shows each choice in full).
            combo.setSizeAdjustPolicy(
                QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon
            )
            combo.setMinimumContentsLength(8)
            disabled = knob.get("disabled_choices") or {}
            slow = knob.get("slow_choices") or {}
            for choice in knob.get("choices") or []:
                combo.addItem(str(choice), choice)
                reason = disabled.get(choice)
                if reason:
                    index = combo.count() - 1
                    model = combo.model()
                    if isinstance(model, QStandardItemModel):
                        model.item(index).setEnabled(False)
                    combo.setItemData(index, reason, Qt.ItemDataRole.ToolTipRole)
                elif slow.get(choice):  # offered, with why it is slower here
                    combo.setItemData(combo.count() - 1, slow[choice], Qt.ItemDataRole.ToolTipRole)
            combo.activated.connect(lambda i: panel.request(name, combo.itemData(i)))
            return combo
        if self.kind in ("int", "float"):
            spin: QSpinBox | QDoubleSpinBox
            lo, hi = knob.get("min"), knob.get("max")
            if self.kind == "int":
                spin = QSpinBox()
                spin.setRange(
                    int(lo) if lo is not None else -INT_LIMIT,
                    int(hi) if hi is not None else INT_LIMIT,
                )
            else:
                spin = QDoubleSpinBox()
                lo_f = float(lo) if lo is not None else -1e9
                hi_f = float(hi) if hi is not None else 1e9
                spin.setDecimals(1 if hi_f - lo_f >= 10 else 3)
                spin.setRange(lo_f, hi_f)
            if knob.get("unit"):
                spin.setSuffix(f" {knob['unit']}")
            spin.setKeyboardTracking(False)
            spin.setAccelerated(True)
            spin.editingFinished.connect(lambda: panel.request(name, self.value()))
            button = QToolButton()
            button.setText("Apply")
            button.setFocusPolicy(Qt.FocusPolicy.NoFocus)  # the draft stays in the field
            button.setToolTip(
                "Apply the value in the field (Enter or leaving the field applies it too)"
            )
            button.setEnabled(False)
            button.clicked.connect(lambda: panel.request(name, self.value()))
            spin.valueChanged.connect(lambda _v: panel.draft_changed(name))
            self.apply_button = button
            return spin
        return QLabel(f"(unsupported knob type {self.kind!r})")

    def value(self) -> Any:
        """The editor's value, typed as the schema says (the runner refuses a wrong type)."""
        editor = self.editor
        if isinstance(editor, QCheckBox):
            return editor.isChecked()
        if isinstance(editor, QComboBox):
            return editor.currentData()
        if isinstance(editor, QSpinBox):
            return int(editor.value())
        if isinstance(editor, QDoubleSpinBox):
            return float(editor.value())
        return None

    def show_value(self, value: Any) -> None:
        """Show the running ``value`` without sending anything (ends any draft)."""
        self.shown = value
        self.draft = False
        editor = self.editor
        editor.blockSignals(True)
        try:
            if isinstance(editor, QCheckBox):
                editor.setChecked(bool(value))
            elif isinstance(editor, QComboBox):
                index = editor.findData(value)
                if index >= 0:
                    editor.setCurrentIndex(index)
            elif isinstance(editor, QSpinBox | QDoubleSpinBox) and value is not None:
                editor.setValue(value)
        finally:
            editor.blockSignals(False)

    def follow(self, current: Any) -> None:
        """Show the running value ``current``: at once when it changed since last shown
        (whoever changed it; a draft of the old value is dropped), else unless the user
        holds a draft (an unchanged field is left alone, so typing is never clobbered)."""
        if not _same(current, self.shown) or (not self.draft and not _same(self.value(), current)):
            self.show_value(current)

    def set_usable(self, usable: bool) -> None:
        self.editor.setEnabled(usable and self.enabled_here)
        if self.apply_button is not None and not (usable and self.enabled_here):
            self.apply_button.setEnabled(False)


class KnobPanel(QWidget):
    """Knob editors for the session's current run; call ``refresh`` from the redraw timer."""

    #: A sentence for the status bar (refusals and failed requests).
    status_message = Signal(str)

    def __init__(self, session: RunSession) -> None:
        super().__init__()
        self.session = session
        self.rows: dict[str, KnobRow] = {}
        self._hello: Any = None
        self._pending: dict[int, tuple[str, Any]] = {}
        self._shown_refusal: Refusal | None = None
        self._locked: str | None = None
        self._current: dict[str, Any] = {}

        self.setMinimumWidth(MIN_WIDTH)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(6, 4, 6, 4)
        layout.setSpacing(4)
        self.hint = QLabel(HINT_NO_RUN)
        self.hint.setTextFormat(Qt.TextFormat.PlainText)
        self.hint.setWordWrap(True)
        palette.set_style(self.hint, "color: $note_text;")
        layout.addWidget(self.hint)
        self.message = QLabel()
        self.message.setTextFormat(Qt.TextFormat.PlainText)
        self.message.setWordWrap(True)
        self.message.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.message.hide()
        layout.addWidget(self.message)
        self.scroll = QScrollArea()
        self.scroll.setWidgetResizable(True)
        self.scroll.setFrameShape(QScrollArea.Shape.NoFrame)
        self.scroll.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        layout.addWidget(self.scroll, 1)

    # ---- Building -------------------------------------------------------------------

    def _rebuild(self, knobs: list[dict[str, Any]]) -> None:
        self.rows.clear()
        self._pending.clear()
        self._current = {}
        self._set_message("", None)
        body = QWidget()
        grid = QGridLayout(body)
        grid.setContentsMargins(0, 0, 0, 0)
        grid.setHorizontalSpacing(6)
        grid.setVerticalSpacing(2)
        grid.setColumnStretch(0, 3)
        grid.setColumnStretch(1, 2)
        line = 0
        groups: dict[str, list[dict[str, Any]]] = {}
        for knob in knobs:
            groups.setdefault(knob.get("group") or "other", []).append(knob)
        for group, members in groups.items():
            header = QLabel(f"<b>{html.escape(GROUP_TITLES.get(group, group.title()))}</b>")
            header.setStyleSheet("padding-top: 6px;")
            grid.addWidget(header, line, 0, 1, 3)
            line += 1
            for knob in members:
                row = KnobRow(knob, self)
                self.rows[row.name] = row
                grid.addWidget(row.label, line, 0)
                grid.addWidget(row.editor, line, 1)
                if row.apply_button is not None:
                    grid.addWidget(row.apply_button, line, 2)
                line += 1
                grid.addWidget(row.note, line, 0, 1, 3)
                line += 1
                grid.addWidget(row.cost, line, 0, 1, 3)
                line += 1
        grid.setRowStretch(line, 1)
        self.scroll.setWidget(body)  # deletes the previous body
        # Wide enough for the widest row beside a vertical scroll bar: nothing is clipped.
        margins = self.layout().contentsMargins()
        extra = (
            self.scroll.verticalScrollBar().sizeHint().width()
            + margins.left()
            + margins.right()
            + 2
        )
        self.setMinimumWidth(max(MIN_WIDTH, body.minimumSizeHint().width() + extra))

    # ---- Refresh (redraw timer) -----------------------------------------------------

    def refresh(self, rows: list[SegmentStats] | None = None) -> None:
        """Follow the session: schema, state, answers, values in force; costs if ``rows``."""
        session = self.session
        hello = session.hello
        if hello is not self._hello:
            self._hello = hello
            self._rebuild(session.knobs if hello is not None else [])
        state = session.state
        running = state is SessionState.RUNNING
        if hello is None:
            hint = HINT_STARTING if state is SessionState.STARTING else HINT_NO_RUN
        elif not running:
            # A lock reason (e.g. a replay's "knobs are read-only") says more than "ended".
            hint = "" if state is SessionState.STARTING else (self._locked or HINT_ENDED)
        else:
            hint = self._locked or ""
        if self.hint.text() != hint:
            self.hint.setText(hint)
        self.hint.setVisible(bool(hint))
        if not running and self._pending and hello is not None:
            self._pending.clear()
            self._set_message("No answer: the run has ended.", Role.ERROR_TEXT)
        self._collect_answers()
        self._show_refusal(session.last_refusal)
        self._current = session.config_values() if hello is not None else {}
        usable = running and not self._locked
        pending_names = {name for name, _ in self._pending.values()}
        for name, row in self.rows.items():
            row.set_usable(usable)
            if name not in pending_names:
                row.follow(self._current.get(name))
            self._update_apply(row)
        if rows is not None:
            self._show_costs(rows)
        for name in pending_names:
            self.rows[name].cost.setText("applying…")
            self.rows[name].cost.show()
        if self._pending:
            names = ", ".join(f"{n} = {format_value(v)}" for n, v in self._pending.values())
            self._set_message(f"applying {names}…", Role.NOTE_TEXT)

    def _collect_answers(self) -> None:
        for request in list(self._pending):
            answer = self.session.answer(request)
            if answer is None:
                continue
            del self._pending[request]
            if isinstance(answer, Refusal):
                self._show_refusal(answer)
            elif self.message.text().startswith("applying"):
                self._set_message("", None)

    def _show_refusal(self, refusal: Refusal | None) -> None:
        if refusal is None or refusal is self._shown_refusal:
            return
        self._shown_refusal = refusal
        text = f"Refused: {refusal.message}"
        self._set_message(text, Role.ERROR_TEXT)
        self.status_message.emit(f"Knob change refused: {refusal.message}")

    def _show_costs(self, rows: list[SegmentStats]) -> None:
        by_id = {row.config_id: row for row in rows}
        last: dict[str, ConfigChange] = {}
        for change in self.session.config_changes():
            if change.id == 0:
                continue
            for name in change.changed:
                last[name] = change  # id order: the latest change wins
        for name, row in self.rows.items():
            change = last.get(name)
            if change is None:
                row.cost.hide()
                continue
            text = cost_text(name, change, by_id.get(change.id))
            if row.cost.text() != text:
                row.cost.setText(text)
            row.cost.show()

    def _update_apply(self, row: KnobRow) -> None:
        button = row.apply_button
        if button is None:
            return
        pending = any(name == row.name for name, _ in self._pending.values())
        button.setEnabled(
            row.editor.isEnabled()
            and not pending
            and not _same(row.value(), self._current.get(row.name))
        )

    # ---- Requests -------------------------------------------------------------------

    def draft_changed(self, name: str) -> None:
        """The user changed a numeric field (signals are blocked while values are shown)."""
        row = self.rows.get(name)
        if row is not None:
            row.draft = not _same(row.value(), row.shown)
            self._update_apply(row)

    def request(self, name: str, value: Any) -> None:
        """Ask the runner for ``name = value`` (no-op if it is already so or already asked)."""
        row = self.rows.get(name)
        if row is None or self._locked or not row.editor.isEnabled():
            return
        if (name, value) in self._pending.values():
            return
        if value == self._current.get(name) and not any(
            n == name for n, _ in self._pending.values()
        ):
            self._update_apply(row)
            return
        try:
            request = self.session.set_knobs({name: value})
        except SessionError as exc:
            self._set_message(str(exc), Role.ERROR_TEXT)
            self.status_message.emit(str(exc))
            row.show_value(self._current.get(name))
            return
        if request is None:
            return
        self._pending[request] = (name, value)
        row.draft = False  # asked for: a refusal snaps it back, an answer shows it
        self._set_message(f"applying {name} = {format_value(value)}…", Role.NOTE_TEXT)
        row.cost.setText("applying…")
        row.cost.show()
        self._update_apply(row)

    @property
    def pending(self) -> dict[int, tuple[str, Any]]:
        """Requests sent and not answered yet: request id → (knob, value)."""
        return dict(self._pending)

    def set_locked(self, reason: str | None) -> None:
        """While the tour drives the knobs (or in a replay), show them but do not send."""
        self._locked = reason
        self.refresh()

    def _set_message(self, text: str, color: Role | None) -> None:
        self.message.setText(text)
        if color is not None:
            bold = "font-weight: 600;" if color is Role.ERROR_TEXT else ""
            palette.set_style(self.message, palette.text_style(color, bold))
        self.message.setVisible(bool(text))
