"""The Ranks dock: one row per rank, the straggler's in bold with the reason above the table."""

from __future__ import annotations

from test_ranks import EVEN, _ranks

from gpuwatch.core.figures.rank_figures import RankFigures
from gpuwatch.qt.ranks_view import HINT_NO_RANKS, NO_STRAGGLER, RanksView


class _Ranked:
    def __init__(self, figures: list[RankFigures]) -> None:
        self.figures = figures

    def rank_figures(self) -> list[RankFigures]:
        return self.figures


def test_the_straggler_row_is_bold_and_the_reason_is_above_the_table(qtbot) -> None:
    slow = [30.0, 0.0, 2.0, 2.0, 1.0, 0.0]
    waiting = [1.0, 0.0, 2.0, 31.0, 1.0, 0.0]
    session = _Ranked(_ranks(waiting, waiting, slow))
    view = RanksView(session)
    qtbot.addWidget(view)
    view.refresh()

    table = view.table
    assert table.rowCount() == 3
    assert [table.item(r, 0).text() for r in range(3)] == ["0", "1", "2"]
    assert [table.item(r, 6).text() for r in range(3)] == ["3 %", "3 %", "86 %"]
    assert [table.item(r, 0).font().bold() for r in range(3)] == [False, False, True]
    assert view.verdict.text().startswith("Straggler: rank 2 holds the others back")
    assert "input wait is 86 %" in table.item(2, 6).toolTip()

    session.figures = _ranks(EVEN, EVEN)  # the ranks even out: no row stays bold
    view.refresh()
    assert table.rowCount() == 2
    assert not any(table.item(r, c).font().bold() for r in range(2) for c in range(9))
    assert view.verdict.text() == NO_STRAGGLER


def test_a_run_of_one_process_says_how_to_start_ranks(qtbot) -> None:
    view = RanksView(object())
    qtbot.addWidget(view)
    view.refresh()
    assert view.table.rowCount() == 0
    assert view.verdict.text() == HINT_NO_RANKS
