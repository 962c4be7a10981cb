"""``gpuwatch export FILE --perfetto OUT.json --csv OUT.csv``: open once, write each format.

Kept out of cli.py so the command's behaviour is testable without parsing; errors are one
sentence (``ExportError`` or ``RecordingError``) for the CLI to print with exit code 1.
"""

from __future__ import annotations

from pathlib import Path

from gpuwatch.core.export_csv import write_csv
from gpuwatch.core.export_perfetto import write_perfetto
from gpuwatch.core.recording import RecordingError
from gpuwatch.core.recording_reader import open_recording


class ExportError(Exception):
    """An output that cannot be written; ``str(exc)`` is one sentence for the user."""


def export_recording(source: str | Path, *, perfetto: str | Path | None = None,
                     csv: str | Path | None = None) -> list[str]:
    """Write the requested exports of ``source``; returns one line per file written."""
    if perfetto is None and csv is None:
        raise ExportError("nothing to export: give --perfetto OUT.json and/or --csv OUT.csv")
    outputs = [Path(p) for p in (perfetto, csv) if p is not None]
    for out in outputs:
        if out.is_dir():
            raise ExportError(f"cannot write {out}: it is a directory")
        if not out.parent.is_dir():
            raise ExportError(f"cannot write {out}: the folder {out.parent} does not exist")
        if out.resolve() == Path(source).resolve():
            raise ExportError(f"cannot write {out}: it is the recording being exported")
    recording = open_recording(source)
    done = []
    for out, write, what in ((perfetto, write_perfetto, "Perfetto trace"),
                             (csv, write_csv, "CSV")):
        if out is None:
            continue
        try:
            write(recording, out)
        except OSError as exc:
            raise ExportError(f"cannot write {out}: {exc.strerror or exc}") from None
        done.append(f"wrote {what} of {len(recording.steps)} steps to {out}")
    return done


__all__ = ["ExportError", "RecordingError", "export_recording"]
