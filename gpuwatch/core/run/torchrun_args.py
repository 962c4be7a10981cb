"""What the GUI reads of torchrun's arguments without importing torch: the training target.

The window and the outcome name a torchrun run after the script (or module) its ranks run.
The GUI never imports torch, so the options that take no value are listed here; a test compares
the list with ``torch.distributed.run``'s own parser.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

#: torchrun's options that take no value (``torch.distributed.run``'s parser; a test checks it).
TORCHRUN_FLAGS = frozenset(
    {
        "-h",
        "--help",
        "-m",
        "--module",
        "--no-python",
        "--no_python",
        "--run-path",
        "--run_path",
        "--standalone",
        "--virtual-local-rank",
        "--virtual_local_rank",
    }
)


def torchrun_target(args: Sequence[str]) -> str | None:
    """The training script's file name (or the module, with ``-m``) in torchrun's arguments:
    the first argument that is neither an option nor an option's value."""
    expects_value = False
    for arg in args:
        if expects_value:
            expects_value = False
        elif arg.startswith("-"):
            expects_value = arg not in TORCHRUN_FLAGS and "=" not in arg
        else:
            module = "-m" in args[: args.index(arg)] or "--module" in args[: args.index(arg)]
            return arg if module else Path(arg).name
    return None
