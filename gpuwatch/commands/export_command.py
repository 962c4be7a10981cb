"""``gpuwatch export FILE --perfetto OUT.json --csv OUT.csv``: open once, write each format.

Kept out of cli.py so the command's behaviour is testable without parsing; errors are one
sentence (``ExportError`` or ``RecordingError``) for the CLI to print with exit code 1.
Each output is written whole or not at all (``core.atomic_file``): a failure, a full disk or
a kill leaves the file that was there before, never a truncated one.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import TextIO

from gpuwatch.commands.progress_line import ProgressLine
from gpuwatch.core.files.export_csv import write_csv
from gpuwatch.core.files.export_perfetto import write_perfetto
from gpuwatch.core.files.recording import RecordingError
from gpuwatch.core.files.recording_reader import open_recording


class ExportError(Exception):
    """An output that cannot be written; ``str(exc)`` is one sentence for the user."""


def export_recording(
    source: str | Path,
    *,
    perfetto: str | Path | None = None,
    csv: str | Path | None = None,
    err: TextIO | None = None,
) -> list[str]:
    """Write the requested exports of ``source``; returns one line per file written.

    ``err`` gets the Perfetto export's progress (a large recording takes a while).
    """
    if perfetto is None and csv is None:
        raise ExportError("nothing to export: give --perfetto OUT.json and/or --csv OUT.csv")
    outputs = [Path(p) for p in (perfetto, csv) if p is not None]
    for out in outputs:
        _check_output(out, Path(source))
    if len(outputs) == 2 and _same_file(*outputs):
        raise ExportError(
            f"--perfetto and --csv name the same file ({outputs[0]}): give each its own"
        )
    recording = open_recording(source)
    done = []
    progress = ProgressLine(err) if err is not None else None
    for out, what in ((perfetto, "Perfetto trace"), (csv, "CSV")):
        if out is None:
            continue
        try:
            if what == "CSV":
                write_csv(recording, out)
            else:
                write_perfetto(
                    recording,
                    out,
                    None
                    if progress is None
                    else (
                        lambda f, out=out: progress.show(
                            "perfetto", f"gpuwatch: writing {out}: {100 * f:.0f} %"
                        )
                    ),
                )
        except OSError as exc:
            raise ExportError(
                f"cannot write {out}: {exc.strerror or exc} (nothing was "
                f"written; a file that was there is unchanged)"
            ) from None
        finally:
            if progress is not None:
                progress.clear()
        done.append(f"wrote {what} of {len(recording.steps)} steps to {out}")
    return done


def _check_output(out: Path, source: Path) -> None:
    try:
        mode = os.stat(out).st_mode
    except FileNotFoundError:
        mode = None
    except OSError as exc:
        raise ExportError(f"cannot write {out}: {exc.strerror or exc}") from None
    if mode is not None and stat.S_ISDIR(mode):
        raise ExportError(f"cannot write {out}: it is a directory")
    if mode is not None and not stat.S_ISREG(mode):
        # It would be replaced by a regular file: never do that to a pipe or a device.
        raise ExportError(f"cannot write {out}: it is not a regular file")
    if not out.parent.is_dir():
        raise ExportError(f"cannot write {out}: the folder {out.parent} does not exist")
    if _same_file(out, source):
        raise ExportError(f"cannot write {out}: it is the recording being exported")


def _same_file(a: Path, b: Path) -> bool:
    """The same path after resolving links, or the same existing file (a hard link)."""
    if a.resolve() == b.resolve():
        return True
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


__all__ = ["ExportError", "RecordingError", "export_recording"]
