"""What a watched script sees of its process: the ``sys.path`` and environment of a plain run.

gpuwatch's launcher (``gpuwatch.core.run.launcher.boot_code``) starts the runner as ``python -c
BOOT`` with nothing of its own in the environment but the link's key, which the runner removes
before the script starts. The runner finds its own code through one ``sys.path`` entry that
``BOOT`` inserts in front to import the ``gpuwatch`` package; for a script,
``settle_source_root`` then moves it to the end (or drops it, where the interpreter already
lists it, as with an install in site-packages). Once ``gpuwatch`` is imported its submodules
load from that package's own folder, whatever ``sys.path`` says, and a trailing entry shadows
nothing: spawned or forkserver DataLoader workers (which get the parent's ``sys.path``) and the
script itself can still ``import gpuwatch.probe``.

``enter_script`` sets ``sys.path[0]`` as ``python SCRIPT`` does
(https://docs.python.org/3/library/sys_path_init.html): the directory of the script with
symbolic links resolved, and no entry at all under ``-P``/``PYTHONSAFEPATH``.
"""

from __future__ import annotations

import os
import sys


def settle_source_root(root: str, path: list[str] | None = None) -> None:
    """Undo the boot's front entry once ``gpuwatch`` is imported; keep ``root`` reachable
    at the end of ``path`` (``sys.path``) unless the interpreter lists it already."""
    path = sys.path if path is None else path
    if path and path[0] == root:
        del path[0]
    if not any(_same_folder(entry, root) for entry in path):
        path.append(root)


def script_path_entry(script: str, platform: str = sys.platform) -> str:
    """The ``sys.path[0]`` that ``python SCRIPT`` computes for ``script`` on ``platform``:
    symbolic links resolved on POSIX, not on Windows (where CPython makes the path absolute
    only)."""
    full = os.path.abspath(script) if platform == "win32" else os.path.realpath(script)
    return os.path.dirname(full)


def enter_script(script: str) -> None:
    """Make ``sys.path[0]`` the script's, in place of the entry ``python -c`` (or ``-m``) put
    there for the runner; with ``safe_path`` the interpreter added none, and neither do we."""
    if getattr(sys.flags, "safe_path", False):
        return
    sys.path[0] = script_path_entry(script)


def _same_folder(entry: str, root: str) -> bool:
    if not entry:  # "" is the working directory, which the script may change
        return False
    return os.path.normcase(os.path.abspath(entry)) == os.path.normcase(os.path.abspath(root))


def configure_stdio() -> None:
    """Line-buffered UTF-8 stdout/stderr, set on the streams themselves rather than through
    ``PYTHONUNBUFFERED``/``PYTHONIOENCODING`` (which the script and its children would inherit):
    the GUI reads the pipe as UTF-8 and shows each line as it comes, as a terminal would.
    An encoding the user chose with ``PYTHONIOENCODING`` is kept."""
    keep_encoding = bool(os.environ.get("PYTHONIOENCODING"))
    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is None:  # replaced by something that is not a text file
            continue
        try:
            if keep_encoding:
                reconfigure(line_buffering=True)
            else:
                reconfigure(line_buffering=True, encoding="utf-8")
        except (OSError, ValueError):  # a closed or detached stream: leave it as it is
            continue
