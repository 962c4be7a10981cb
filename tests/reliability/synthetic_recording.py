"""Write a valid ``.gpuwatch`` recording of any size straight into SQLite, without a run.

The reliability tests need recordings that a real run would take hours or weeks to make (a
million steps, a month long) and the export bench needs the same: this writes the tables of
docs/recording-format.md directly, with the schema the ``Recorder`` creates, so the reader
cannot tell the difference.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

from gpuwatch.core.files.recording import MARK_COLUMNS, SCHEMA, SCHEMA_VERSION

T0_NS = 1_000_000_000
#: A 2 ms step: 7 marks 0.25 ms apart after a 0.5 ms gap to the previous step.
STEP_NS = 2_000_000
MARK_NS = 250_000
STEPS_PER_MESSAGE = 512


def write_recording(
    path: Path,
    steps: int,
    *,
    span_ns: int | None = None,
    changed: str = '{"amp": true}',
    samples: int = 32,
) -> Path:
    """A closed recording of ``steps`` CPU steps in two configurations.

    ``span_ns`` stretches the run (its last message comes that long after t0) for recordings
    longer than their steps; ``changed`` is config 1's ``changed`` JSON as stored (a test can
    put ``NaN`` there, as a hand-edited or foreign file might hold); ``samples`` is every step's
    sample count.
    """
    conn = sqlite3.connect(path, isolation_level=None)
    conn.executescript(f"BEGIN; {SCHEMA}")
    end_ns = T0_NS + steps * STEP_NS + STEP_NS
    t1_ns = max(end_ns, T0_NS + span_ns) if span_ns is not None else end_ns
    meta = {
        "schema_version": SCHEMA_VERSION,
        "gpuwatch_version": "test",
        "created": "2026-01-01T00:00:00+00:00",
        "spec": {"workload": "synthetic"},
        "machine": {},
        "t0_ns": T0_NS,
        "t1_ns": t1_ns,
        "dropped_messages": 0,
        "exit_code": 0,
        "error": None,
        "state": "finished",
        "closed": True,
    }
    conn.executemany(
        "INSERT INTO meta VALUES (?, ?)", [(k, json.dumps(v)) for k, v in meta.items()]
    )
    hello = {
        "protocol": 1,
        "pid": 1,
        "workload": "synthetic",
        "device": {"kind": "cpu", "name": "test CPU", "cores": 2},
        "versions": {},
        "knobs": [],
        "config": {"id": 0, "values": {"amp": False}, "warmup_steps": 0},
    }
    conn.execute("INSERT INTO events VALUES (1, ?, 'hello', ?)", (T0_NS, json.dumps(hello)))
    change_at = steps // 2
    conn.execute(
        "INSERT INTO configs VALUES (0, ?, 'baseline', '{\"amp\": false}', '{}', 0, "
        "0, 0.0, '[]', NULL)",
        (T0_NS,),
    )
    conn.execute(
        "INSERT INTO configs VALUES (1, ?, 'amp=on', '{\"amp\": true}', ?, ?, 2, "
        "0.001, '[]', NULL)",
        (T0_NS + change_at * STEP_NS, changed, change_at),
    )
    seq = 1
    columns = f"step, seq, config, samples, {', '.join(MARK_COLUMNS)}"
    for first in range(0, steps, STEPS_PER_MESSAGE):
        ids = range(first, min(steps, first + STEPS_PER_MESSAGE))
        seq += 1
        last_mark = T0_NS + ids[-1] * STEP_NS + STEP_NS + 6 * MARK_NS
        conn.execute(
            "INSERT INTO events VALUES (?, ?, 'steps', ?)",
            (seq, last_mark, json.dumps({"rows": len(ids)})),
        )
        conn.executemany(
            f"INSERT INTO steps ({columns}) VALUES ({', '.join('?' * 11)})",
            [
                (
                    i,
                    seq,
                    int(i >= change_at),
                    samples,
                    *(T0_NS + i * STEP_NS + STEP_NS + j * MARK_NS for j in range(7)),
                )
                for i in ids
            ],
        )
    conn.execute(
        "INSERT INTO events VALUES (?, ?, 'bye', '{\"reason\": \"finished\"}')", (seq + 1, t1_ns)
    )
    conn.execute("COMMIT")
    conn.close()
    return path
