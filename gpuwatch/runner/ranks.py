"""Which rank of a distributed job this process is, and how a launcher starts a rank watched.

torchrun gives every rank its identity in the environment (``RANK``, ``LOCAL_RANK``,
``WORLD_SIZE``, ``GROUP_RANK``); a rank runner reads it once, before the script's first line,
and sends it in ``hello.rank`` with the node's host name, so the GUI can tell ranks and nodes
apart. ``rank_command`` turns the command torchrun built for a rank (``python -u SCRIPT ARGS``
or ``python -u -m MODULE ARGS``) into the same interpreter running our boot, which then runs
that script or module as ``python`` would (``script_session``): the rank's ``sys.argv``,
environment and working directory stay the ones torchrun gave it.
"""

from __future__ import annotations

import socket
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass

from gpuwatch.protocol import AS_RANK_FLAG, AUTHKEY_FILE_FLAG, boot_code


class RankLaunchError(RuntimeError):
    """torchrun was asked for a rank command gpuwatch cannot watch (one sentence)."""


@dataclass(frozen=True)
class RankIdentity:
    """``hello.rank``: where this rank sits in the job."""

    rank: int
    local_rank: int
    world_size: int
    node_rank: int
    node: str

    @classmethod
    def from_environ(cls, environ: Mapping[str, str]) -> RankIdentity:
        """The identity torchrun's environment gives; ``ValueError`` names what is missing."""
        values: dict[str, int] = {}
        for name in ("RANK", "LOCAL_RANK", "WORLD_SIZE"):
            text = environ.get(name)
            if text is None or not text.strip().isdigit():
                raise ValueError(
                    f"{AS_RANK_FLAG} needs {name} in the environment (torchrun sets it), "
                    f"got {text!r}"
                )
            values[name] = int(text)
        group = environ.get("GROUP_RANK", "0")
        return cls(
            rank=values["RANK"],
            local_rank=values["LOCAL_RANK"],
            world_size=values["WORLD_SIZE"],
            node_rank=int(group) if group.strip().isdigit() else 0,
            node=socket.gethostname(),
        )

    def fields(self) -> dict[str, int | str]:
        return asdict(self)


@dataclass(frozen=True)
class RankLink:
    """How a rank reaches the GUI: the link's address, the file holding its key, and the
    runner options every rank gets (device, max steps, private folder)."""

    root: str
    address: str
    keyfile: str
    options: tuple[str, ...] = ()


def rank_command(cmd_args: Sequence[str], link: RankLink) -> list[str]:
    """torchrun's ``["-u", SCRIPT, *ARGS]`` or ``["-u", "-m", MODULE, *ARGS]`` as the arguments
    of the same interpreter running the rank watched: ``-u`` stays (torchrun's choice), the
    boot follows, then the target and, after ``--``, the rank's own arguments untouched
    (torchrun's ``--local-rank=`` macro included, which it substitutes per rank)."""
    args = list(cmd_args)
    if not args or args[0] != "-u":
        raise RankLaunchError(
            f"torchrun built a rank command gpuwatch does not know ({args[:3]!r}): only "
            "Python ranks can be watched (no --no-python or --run-path)"
        )
    rest = args[1:]
    if rest[:1] == ["-m"]:
        if len(rest) < 2:
            raise RankLaunchError("torchrun was given -m without a module")
        target = ["--module", rest[1]]
        script_args = rest[2:]
    elif rest:
        target = ["--script", rest[0]]
        script_args = rest[1:]
    else:
        raise RankLaunchError("torchrun was given no training script")
    return [
        "-u",
        "-c",
        boot_code(link.root),
        "--connect",
        link.address,
        AUTHKEY_FILE_FLAG,
        link.keyfile,
        AS_RANK_FLAG,
        *target,
        *link.options,
        "--",
        *script_args,
    ]
