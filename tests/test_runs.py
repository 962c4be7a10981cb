"""Every run kept (core.run.runs): restarts, tours and the one baseline of every speedup."""

from __future__ import annotations

import dataclasses

import pytest
from fake_knob_session import row

from gpuwatch.core.run.runs import (
    TOUR,
    WORKLOAD,
    RowRef,
    RunInfo,
    Runs,
    file_stem,
    noise_text,
)

VISION = RunInfo(WORKLOAD, "vision", "fake CPU")
SCRIPT = RunInfo("script", "train.py", "fake CPU")
QUIET = (100.0, 100.5, 99.5)


def rated(config_id: int, label: str, rate: float, **kw) -> object:
    spread = kw.pop("rates", tuple(rate * r / 100 for r in QUIET))
    return row(config_id, label, samples_per_s=rate, window_rates=spread, **kw)


def speedups(runs: Runs) -> dict[tuple[int, str], float | None]:
    return {(g.run.run_id, s.row.label): s.row.speedup for g in runs.groups() for s in g.rows}


def test_a_restart_keeps_the_first_run_and_its_ratio():
    runs = Runs(clock=lambda: 0.0)
    runs.follow("first", SCRIPT, [rated(0, "baseline", 78.0, live=True)])
    runs.follow("first", SCRIPT, [rated(0, "baseline", 78.0)])
    runs.finish()  # the window starts the script again
    runs.follow("second", SCRIPT, [rated(0, "baseline", 138.0, live=True)])
    first, second = runs.runs
    assert (first.label, second.label) == ("run 1 · train.py", "run 2 · train.py")
    assert not first.live and second.live
    assert first.rows[0].samples_per_s == 78.0  # kept, not dropped by the restart
    assert speedups(runs) == {
        (1, "baseline"): pytest.approx(1.0),
        (2, "baseline"): pytest.approx(138 / 78),
    }
    assert runs.baseline() == RowRef(1, 0)
    assert runs.baseline_label() == "run 1 · train.py · baseline"
    change = runs.live_change()
    assert change is not None and not change.within_noise
    assert change.text() == "1.77× samples/s vs “run 1 · train.py · baseline” (78.0 → 138/s)"
    # Later rows of the finished session change nothing of its run.
    runs.follow("second", SCRIPT, [rated(0, "baseline", 140.0, live=True)])
    assert runs.run(1).rows[0].samples_per_s == 78.0


def test_choosing_a_baseline_changes_every_ratio_and_only_the_user_does():
    runs = Runs()
    runs.follow(1, VISION, [rated(0, "baseline", 100.0), rated(1, "workers", 200.0)])
    runs.finish()
    runs.follow(2, VISION, [rated(0, "baseline", 150.0)])
    assert runs.chosen_baseline is None
    runs.choose_baseline(RowRef(1, 1))
    assert speedups(runs) == {
        (1, "baseline"): pytest.approx(0.5),
        (1, "workers"): pytest.approx(1.0),
        (2, "baseline"): pytest.approx(0.75),
    }
    assert runs.baseline_label() == "run 1 · vision · workers"
    runs.follow(3, VISION, [rated(0, "baseline", 400.0)])  # a new run does not move it
    assert runs.baseline() == RowRef(1, 1)
    runs.choose_baseline(None)
    assert runs.baseline() == RowRef(1, 0)


def test_a_second_tour_is_its_own_group_measured_against_the_same_baseline():
    runs = Runs()
    rows = [rated(0, "baseline", 360.0, live=True)]
    runs.follow("run", VISION, rows)
    first_tour = runs.begin_tour()
    runs.tour_config(first_tour, 0)  # the tour's baseline stage holds the config running
    assert [(r.kind, r.label) for r in runs.runs] == [(TOUR, "tour 1 · vision")]
    rows = [rated(0, "baseline", 360.0), rated(1, "workers", 419.0), rated(2, "AMP", 100.0)]
    runs.follow("run", VISION, rows)
    second_tour = runs.begin_tour()
    rows = [*rows, rated(3, "baseline", 361.0), rated(4, "workers", 420.0, live=True)]
    runs.follow("run", VISION, rows)
    assert len(runs.groups()[-1].rows) == 0  # nothing claimed before its first stage
    runs.tour_config(second_tour, 3)
    groups = runs.groups()
    assert [g.run.label for g in groups] == ["tour 1 · vision", "tour 2 · vision"]
    assert [s.row.config_id for s in groups[0].rows] == [0, 1, 2]
    assert [s.row.config_id for s in groups[1].rows] == [3, 4]
    # Every row against tour 1's baseline: the second tour does not re-base the first.
    assert groups[0].rows[1].row.speedup == pytest.approx(419 / 360)
    assert groups[1].rows[0].row.speedup == pytest.approx(361 / 360)
    assert groups[0].rows[0].is_baseline and not groups[1].rows[0].is_baseline


def test_a_tour_after_a_while_splits_the_run():
    runs = Runs()
    rows = [rated(0, "baseline", 100.0), rated(1, "num_workers=2", 180.0, live=True)]
    runs.follow("run", VISION, rows)
    tour = runs.begin_tour()
    runs.follow("run", VISION, [*rows[:1], rated(1, "num_workers=2", 180.0), rated(2, "x", 90.0)])
    runs.tour_config(tour, 2)
    assert [(g.run.label, len(g.rows)) for g in runs.groups()] == [
        ("run 1 · vision", 2),
        ("tour 1 · vision", 1),
    ]


def test_noise_band_and_within_noise():
    runs = Runs()
    scattered = (80.0, 100.0, 120.0, 90.0, 110.0)
    runs.follow(
        1,
        VISION,
        [
            rated(0, "baseline", 100.0),
            rated(1, "same", 103.0),
            rated(2, "faster", 150.0),
            rated(3, "scattered", 108.0, rates=scattered),
        ],
    )
    base, same, faster, scattered_row = runs.groups()[0].rows
    assert base.is_baseline and base.noise is None and not base.within_noise
    assert noise_text(same.noise) == "±5%" and same.within_noise
    assert noise_text(faster.noise) == "±5%" and not faster.within_noise
    # Scattered rates: a wider band (twice the medians' uncertainty, at most 10 %).
    assert noise_text(scattered_row.noise) == "±10%" and scattered_row.within_noise


def test_renaming_and_the_recording_name():
    runs = Runs()
    runs.follow(1, SCRIPT, [rated(0, "baseline", 78.0)])
    runs.rename(1, "  before   the fix ")
    run = runs.run(1)
    assert run.label == "before the fix" and run.renamed
    assert file_stem(run.label) == "before-the-fix"
    assert file_stem("run 2 · train.py") == "run-2-train.py"
    assert file_stem("/../") == "run"
    revision = runs.revision
    runs.rename(1, "   ")  # an empty label is refused
    assert runs.run(1).label == "before the fix" and runs.revision == revision


def test_a_baseline_from_another_recording():
    runs = Runs()
    runs.follow(1, RunInfo("recording", "b.gpuwatch", "cpu"), [rated(0, "baseline", 181.0)])
    a_row = rated(2, "workers", 100.0)
    runs.set_reference("A · workers", a_row)
    (scored,) = runs.groups()[0].rows
    assert scored.row.speedup == pytest.approx(1.81) and not scored.is_baseline
    assert runs.baseline_label() == "A · workers"
    # A's own table: the reference is one of its rows, so that row is the baseline.
    own = Runs()
    own.follow(1, RunInfo("recording", "a.gpuwatch", "cpu"), [a_row])
    own.set_reference("A · workers", dataclasses.replace(a_row))
    assert own.groups()[0].rows[0].is_baseline


def test_a_run_of_another_program_gets_no_ratio_until_one_of_its_rows_is_pinned():
    runs = Runs(clock=lambda: 0.0)
    runs.follow("demo", VISION, [rated(0, "baseline", 1_000.0), rated(1, "workers", 2_000.0)])
    runs.finish()  # then the user watches their own script in the same window
    runs.follow("script", SCRIPT, [rated(0, "baseline", 40.0), rated(1, "workers", 80.0)])
    assert speedups(runs) == {
        (1, "baseline"): pytest.approx(1.0),
        (1, "workers"): pytest.approx(2.0),
        (2, "baseline"): None,  # not "0.04×": another program's samples/s
        (2, "workers"): None,
    }
    assert runs.live_change() is None
    runs.choose_baseline(RowRef(2, 0))  # the user pins the script's own first row
    assert speedups(runs) == {
        (1, "baseline"): None,
        (1, "workers"): None,
        (2, "baseline"): pytest.approx(1.0),
        (2, "workers"): pytest.approx(2.0),
    }
    change = runs.live_change()
    assert change is not None and change.ratio == pytest.approx(2.0)
