"""The GUI's own log file: a rotating file in the platform's log folder.

A desktop app started from an icon has no terminal, so warnings and unexpected exceptions
must land somewhere a user can find ("Help → Open log folder") and attach to a bug report.
``GPUWATCH_LOG_DIR`` (or the ``directory`` argument) moves it: tests never write into the
user's real log folder.
"""

from __future__ import annotations

import logging
import os
from logging.handlers import RotatingFileHandler
from pathlib import Path

import platformdirs

#: Environment variable that overrides the log folder (tests, portable installs).
LOG_DIR_ENV = "GPUWATCH_LOG_DIR"
LOG_NAME = "gpuwatch.log"
#: One file of this size plus this many rotated ones: enough history, bounded disk use.
MAX_BYTES = 1_000_000
BACKUPS = 3
_FORMAT = "%(asctime)s %(levelname)s %(name)s [%(threadName)s] %(message)s"


def log_dir() -> Path:
    """The folder the log file lives in (not created here)."""
    override = os.environ.get(LOG_DIR_ENV)
    if override:
        return Path(override)
    return Path(platformdirs.user_log_dir("gpuwatch", appauthor=False))


def log_file(directory: Path | None = None) -> Path:
    """The app log's path in ``directory`` (default: ``log_dir()``)."""
    return (directory or log_dir()) / LOG_NAME


def setup_logging(directory: Path | None = None, level: int = logging.INFO) -> Path | None:
    """Send the ``gpuwatch`` logger to the rotating file; returns its path, or None if the
    folder cannot be written (the app still runs, it just logs to stderr only).

    Idempotent: a second call with the same file adds no second handler; a call with another
    folder moves the log there.
    """
    path = log_file(directory)
    logger = logging.getLogger("gpuwatch")
    for handler in list(logger.handlers):
        if isinstance(handler, _AppLogHandler):
            if Path(handler.baseFilename) == path.resolve():
                return path
            logger.removeHandler(handler)
            handler.close()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        handler = _AppLogHandler(path, maxBytes=MAX_BYTES, backupCount=BACKUPS, encoding="utf-8")
    except OSError:
        return None
    handler.setFormatter(logging.Formatter(_FORMAT))
    logger.addHandler(handler)
    if logger.level == logging.NOTSET or logger.level > level:
        logger.setLevel(level)
    return path


def active_log_file() -> Path | None:
    """The file the ``gpuwatch`` logger writes to now, or None before ``setup_logging``."""
    for handler in logging.getLogger("gpuwatch").handlers:
        if isinstance(handler, _AppLogHandler):
            return Path(handler.baseFilename)
    return None


class _AppLogHandler(RotatingFileHandler):
    """Marks the handler ``setup_logging`` owns (so it is found and replaced, never doubled)."""
