"""``python -m gpuwatch.runner``: the training process the GUI starts (docs/design.md, "Lifecycle").

The GUI starts it as ``python -c BOOT`` (``gpuwatch.protocol.boot_code``) so that nothing
of gpuwatch's goes into the environment a watched script sees (``script_environment``); ``-m``
works too wherever the ``gpuwatch`` package is importable.

``--workload NAME`` trains a built-in workload; ``--script PATH -- ARGS`` runs the user's own
script instead (``script_session``), with everything after ``--`` as its arguments, and
``--module NAME -- ARGS`` a module as ``python -m NAME ARGS`` would.

Exit codes: 0 normal end (stop, max-steps, link closed), 1 training error, 2 bad arguments,
3 could not connect/authenticate; a script's own exit code when it ends by itself
(``script_session`` lists its outcomes). Failures before the link is up print one line on
stderr, never a traceback; once it is up, a watched script's errors travel to the GUI in the
``error`` message only (its stderr is shown as the script's output, so a line there would be
said twice).

Nothing heavy is imported before the arguments and the link are checked, so those errors are
instant; torch comes in with ``gpuwatch.runner.session``.
"""

from __future__ import annotations

import argparse
import os
import re
from collections.abc import Sequence

from gpuwatch.protocol import (
    AS_RANK_FLAG,
    AUTHKEY_ENV,
    AUTHKEY_FILE_FLAG,
    AUTHKEY_STDIN_FLAG,
    TORCHRUN_MODULES,
)
from gpuwatch.runner.link import (
    Link,
    LinkError,
    interrupt_on_break,
    read_authkey,
    read_authkey_file,
    read_authkey_stdin,
)
from gpuwatch.runner.ranks import RankIdentity
from gpuwatch.runner.script_environment import configure_stdio, settle_source_root
from gpuwatch.runner.workloads import WORKLOAD_NAMES

EXIT_LINK = 3
_DEVICE = re.compile(r"^(auto|cpu|cuda|cuda:\d+)$")


def _device(text: str) -> str:
    if not _DEVICE.match(text):
        raise argparse.ArgumentTypeError(f"{text!r} is not auto, cpu, cuda or cuda:N")
    return text


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} must be at least 1")
    return value


def build_parser() -> argparse.ArgumentParser:
    """The runner's command line: connect and train a workload or a script, or ``--survey``."""
    parser = argparse.ArgumentParser(
        prog="python -m gpuwatch.runner",
        description="gpuwatch's training process: runs a workload and streams step timing to "
        "the gpuwatch window over an authenticated link (key on stdin with "
        f"{AUTHKEY_STDIN_FLAG}, else in ${AUTHKEY_ENV}).",
    )
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument(
        "--connect",
        metavar="ADDRESS",
        help="link address: socket path, Windows pipe name, or HOST:PORT",
    )
    mode.add_argument(
        "--survey",
        action="store_true",
        help="print what this interpreter has (torch, CUDA, devices) as JSON",
    )
    what = parser.add_mutually_exclusive_group()
    what.add_argument(
        "--workload",
        choices=WORKLOAD_NAMES,
        default=None,
        help="built-in workload (default: vision)",
    )
    what.add_argument(
        "--script",
        metavar="PATH",
        help="run this Python script as __main__ instead of a workload; its arguments follow a --",
    )
    what.add_argument(
        "--module",
        metavar="NAME",
        help="run this module as python -m NAME would, instead of a workload; its arguments "
        "follow a --",
    )
    key = parser.add_mutually_exclusive_group()
    key.add_argument(
        AUTHKEY_STDIN_FLAG,
        action="store_true",
        help="read the link's hex key from the first line of stdin (how "
        f"gpuwatch starts the runner) instead of ${AUTHKEY_ENV}",
    )
    key.add_argument(
        AUTHKEY_FILE_FLAG,
        metavar="PATH",
        default=None,
        help="read the link's hex key from this file (how a launcher runner starts its ranks)",
    )
    parser.add_argument(
        "--ranks-only",
        action="store_true",
        help="with --module torch.distributed.run: no link of this process's own; the ranks "
        "it starts connect to ADDRESS (a window on another machine, its token on stdin)",
    )
    parser.add_argument(
        AS_RANK_FLAG,
        action="store_true",
        help="this process is one rank of a torchrun job (RANK, LOCAL_RANK and WORLD_SIZE "
        "in the environment): hello says which",
    )
    parser.add_argument(
        "--device",
        type=_device,
        default="auto",
        help="auto, cpu, cuda or cuda:N (default: %(default)s)",
    )
    parser.add_argument(
        "--max-steps",
        type=_positive,
        default=None,
        metavar="N",
        help="stop after N steps (default: run until stopped)",
    )
    parser.add_argument("--seed", type=int, default=0, help="data and model seed")
    parser.add_argument(
        "--private-dir",
        metavar="DIR",
        default=None,
        help="the run's private folder, removed by gpuwatch when the run ends however it "
        "ends: the runner's own files go there (default: the temp folder)",
    )
    return parser


def split_script_args(argv: Sequence[str]) -> tuple[list[str], list[str]]:
    """The runner's own arguments, and the script's: everything after the first ``--``."""
    argv = list(argv)
    if "--" not in argv:
        return argv, []
    cut = argv.index("--")
    return argv[:cut], argv[cut + 1 :]


def main(argv: Sequence[str] | None = None, *, source_root: str | None = None) -> int:
    """Run as the arguments say; ``source_root`` is the ``sys.path`` entry the launcher's boot
    put in front to import gpuwatch (None under ``-m``)."""
    import sys

    configure_stdio()
    own, script_args = split_script_args(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    args = parser.parse_args(own)  # exits 2 on bad arguments
    user_code = args.script is not None or args.module is not None
    if script_args and not user_code:
        parser.error("arguments after -- are the script's: they need --script PATH or --module")
    if source_root is not None and user_code:
        settle_source_root(source_root)  # before torch: nothing of ours shadows the script's
    if args.survey:
        from gpuwatch.runner import survey

        return survey.main()
    interrupt_on_break()  # Windows: a stop's CTRL_BREAK_EVENT ends the run as Ctrl-C does
    from gpuwatch.runner.session import say

    rank: RankIdentity | None = None
    if args.as_rank:
        try:
            rank = RankIdentity.from_environ(os.environ)
        except ValueError as exc:
            parser.error(str(exc))
    if args.ranks_only:
        return _ranks_only(parser, args, script_args, source_root)
    try:
        if args.authkey_stdin:
            key = read_authkey_stdin()
        elif args.authkey_file:
            key = read_authkey_file(args.authkey_file)
        else:
            key = read_authkey(os.environ)
        link = Link.connect(args.connect, key)
    except LinkError as exc:
        say(str(exc))
        return EXIT_LINK
    from gpuwatch.runner.session import EXIT_INTERRUPTED, run

    try:
        if user_code:
            # Started by hand with the key in the environment: the script's os.environ and
            # its children lose it, but this process's /proc/self/environ keeps it (only the
            # same user can read that). gpuwatch passes the key on stdin instead.
            os.environ.pop(AUTHKEY_ENV, None)
            if args.module in TORCHRUN_MODULES and rank is None:
                return _run_torchrun(link, args, script_args, key, source_root)
            return _run_user_code(link, args, script_args, rank, key)
        return run(
            link,
            workload_name=args.workload or "vision",
            device_spec=args.device,
            max_steps=args.max_steps,
            seed=args.seed,
        )
    except KeyboardInterrupt:  # Ctrl-C while torch imports (started by hand)
        say("interrupted")
        return EXIT_INTERRUPTED


def _run_user_code(
    link: Link,
    args: argparse.Namespace,
    script_args: list[str],
    rank: RankIdentity | None,
    key: bytes,
) -> int:
    """The user's script or module, watched (``script_session``); ``rank`` when it is one
    rank of a torchrun job. Ranks the script spawns itself reach the GUI with ``key``."""
    from gpuwatch.runner.script_session import RunPlace, run_module, run_script
    from gpuwatch.runner.spawned_ranks import RankStart

    name = args.module or os.path.basename(args.script)
    spawn = RankStart(args.connect, key, args.device, args.max_steps, name)
    place = RunPlace(args.device, args.max_steps, args.private_dir, rank, spawn)
    if args.module is not None:
        return run_module(link, name=args.module, args=script_args, place=place)
    return run_script(link, path=args.script, args=script_args, place=place)


def _run_torchrun(
    link: Link,
    args: argparse.Namespace,
    torchrun_args: list[str],
    key: bytes,
    source_root: str | None,
) -> int:
    """torchrun in this process, every rank it starts watched (``torchrun_launcher``)."""
    from gpuwatch.runner.torchrun_launcher import LauncherPlace, run_torchrun

    if args.device.startswith("cuda:"):
        link.send(
            "error",
            type="UsageError",
            message=f"--device {args.device} with torchrun: every rank chooses its own GPU "
            "(usually cuda:LOCAL_RANK); give --device cuda, cpu or auto",
            traceback="",
        )
        link.send("bye", reason="error", code=2, steps=0, cuda_used=False, instrumentation="auto")
        link.finished()
        link.close()
        return 2
    root = source_root or os.path.dirname(os.path.dirname(os.path.dirname(__file__)))
    place = LauncherPlace(
        address=args.connect,
        key=key,
        root=root,
        device_spec=args.device,
        max_steps=args.max_steps,
        private_dir=args.private_dir,
    )
    return run_torchrun(link, args.module, torchrun_args, place)


def _ranks_only(
    parser: argparse.ArgumentParser,
    args: argparse.Namespace,
    torchrun_args: list[str],
    source_root: str | None,
) -> int:
    """``--ranks-only``: torchrun here, its ranks watched by a window elsewhere."""
    from gpuwatch.runner.session import say
    from gpuwatch.runner.torchrun_launcher import LauncherPlace, run_ranks_only

    if args.module not in TORCHRUN_MODULES:
        parser.error(f"--ranks-only runs {' or '.join(TORCHRUN_MODULES)} (--module)")
    try:
        key = read_authkey_stdin() if args.authkey_stdin else read_authkey(os.environ)
    except LinkError as exc:
        say(str(exc))
        return EXIT_LINK
    root = source_root or os.path.dirname(os.path.dirname(os.path.dirname(__file__)))
    place = LauncherPlace(args.connect, key, root, args.device, args.max_steps, None)
    return run_ranks_only(args.module, torchrun_args, place)
