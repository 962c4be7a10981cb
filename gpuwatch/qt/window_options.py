"""What the command line asks of the window, as one typed value (no Qt here).

The CLI builds a ``WindowOptions`` once from its parsed arguments; ``run_window`` and
``MainWindow`` read its fields instead of probing an argparse namespace for attributes that a
subcommand may or may not have set.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from gpuwatch.core.files.recording_reader import Recording
from gpuwatch.core.run.session import LaunchSpec


@dataclass(frozen=True)
class WindowOptions:
    """The window's start-up choices; every field has the default of a plain ``gpuwatch``."""

    #: Built-in workload and device (None: what the user last chose in the window).
    workload: str | None = None
    device: str | None = None
    #: The training interpreter (None: gpuwatch's own Python, or the remembered one when frozen).
    python: str | None = None
    #: Start the run as soon as the window is shown (``--no-start`` turns it off).
    autostart: bool = True
    #: Begin the tour as soon as a run is up.
    tour: bool = False
    #: Close after this many seconds, saving ``screenshot`` first when given.
    demo_seconds: float | None = None
    screenshot: Path | None = None
    #: ``gpuwatch run SCRIPT`` (or ``-m MODULE``): it replaces the workload.
    script: str | None = None
    module: str | None = None
    script_args: tuple[str, ...] = ()
    cwd: str | None = None
    seconds: float | None = None
    #: Record the run to this file from its start.
    record: Path | None = None
    #: Also watch ranks of other machines (``gpuwatch run --listen``): where to listen.
    listen: tuple[str, int] | None = None
    #: ``gpuwatch replay``: a recording shown instead of a live run, and one beside it.
    recording: Recording | None = None
    compare: Recording | None = None
    #: How the window looks: presentation mode, a forced theme, a fixed size in pixels.
    presentation: bool = False
    theme: str | None = None
    window_size: tuple[int, int] | None = None

    def script_spec(self) -> LaunchSpec | None:
        """What Start runs in script mode (device and Python are filled in at Start)."""
        if not self.script and not self.module:
            return None
        return LaunchSpec(
            script=self.script,
            module=self.module,
            script_args=tuple(self.script_args),
            cwd=self.cwd,
            seconds=self.seconds,
            listen=self.listen,
        )
