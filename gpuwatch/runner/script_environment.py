"""What a watched script sees of its process: the ``sys.path`` and environment of a plain run.

gpuwatch's launcher (``gpuwatch.protocol.boot_code``) starts the runner as ``python -c
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
symbolic links resolved, and no entry at all under ``-P``/``PYTHONSAFEPATH``; ``enter_module``
sets it as ``python -m MODULE`` does: the working directory. ``module_file`` finds a module
without running any of its code, so a name that is not there is one sentence before torch loads.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
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


def enter_module() -> None:
    """Make ``sys.path[0]`` the working directory, as ``python -m`` does (none under
    ``safe_path``)."""
    if getattr(sys.flags, "safe_path", False):
        return
    sys.path[0] = os.getcwd()


class ModuleNotFound(Exception):
    """The module ``python -m`` would not find; the message is one sentence."""


def module_file(name: str) -> str:
    """The file ``python -m name`` would run (a package's ``__main__``), found on ``sys.path``
    without executing anything: each package level is looked up in its parent's folders, not
    imported. Raises ``ModuleNotFound``."""
    spec = _find(name)
    if spec.submodule_search_locations is not None:  # a package runs its __main__
        spec = _find(f"{name}.__main__", package=name)
    if not spec.origin or not os.path.isfile(spec.origin):
        raise ModuleNotFound(f"{name} has no Python file to run ({spec.origin or 'built in'})")
    return spec.origin


def _find(name: str, package: str | None = None) -> importlib.machinery.ModuleSpec:
    parts = name.split(".")
    where = f"on sys.path (working directory {os.getcwd()})"
    try:
        try:
            spec = importlib.util.find_spec(parts[0])  # a top-level name imports nothing
            for depth in range(2, len(parts) + 1):
                locations = None if spec is None else spec.submodule_search_locations
                spec = None if locations is None else _find_in(".".join(parts[:depth]), locations)
        except KeyError:  # a namespace package below the top needs its parent imported
            spec = importlib.util.find_spec(name)  # imports the parents, as python -m does
    except (ImportError, ValueError) as exc:
        raise ModuleNotFound(f"cannot look up module {name}: {exc}") from None
    if spec is None:
        if package is not None:
            raise ModuleNotFound(f"{package} is a package without a __main__ module to run")
        raise ModuleNotFound(f"no module named {name} {where}")
    return spec


def _find_in(name: str, locations: object) -> importlib.machinery.ModuleSpec | None:
    """``name``'s spec from the meta path finders, in its parent's folders (as the import
    system does once the parent is imported)."""
    for finder in sys.meta_path:
        find_spec = getattr(finder, "find_spec", None)
        spec = None if find_spec is None else find_spec(name, locations)
        if spec is not None:
            return spec
    return None


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
