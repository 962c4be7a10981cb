"""``python -m gpuwatch.runner``: the training process the GUI starts (DESIGN.md §2).

Exit codes: 0 normal end (stop, max-steps, link closed), 1 training error, 2 bad arguments,
3 could not connect/authenticate. Failures print one line on stderr, never a traceback (a
training exception's traceback travels to the GUI in the ``error`` message instead).

Nothing heavy is imported before the arguments and the link are checked, so those errors are
instant; torch comes in with ``gpuwatch.runner.session``.
"""

from __future__ import annotations

import argparse
import os
import re
from collections.abc import Sequence

from gpuwatch.runner.link import Link, LinkError, read_authkey
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
    parser = argparse.ArgumentParser(
        prog="python -m gpuwatch.runner",
        description="gpuwatch's training process: runs a workload and streams step timing to "
                    "the gpuwatch window over an authenticated link (key in $GPUWATCH_AUTHKEY).")
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--connect", metavar="ADDRESS",
                      help="link address: socket path, Windows pipe name, or HOST:PORT")
    mode.add_argument("--probe", action="store_true",
                      help="print what this interpreter has (torch, CUDA, devices) as JSON")
    parser.add_argument("--workload", choices=WORKLOAD_NAMES, default="vision",
                        help="built-in workload (default: %(default)s)")
    parser.add_argument("--device", type=_device, default="auto",
                        help="auto, cpu, cuda or cuda:N (default: %(default)s)")
    parser.add_argument("--max-steps", type=_positive, default=None, metavar="N",
                        help="stop after N steps (default: run until stopped)")
    parser.add_argument("--seed", type=int, default=0, help="data and model seed")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)  # exits 2 on bad arguments
    if args.probe:
        from gpuwatch.runner import probe

        return probe.main()
    from gpuwatch.runner.session import say

    try:
        link = Link.connect(args.connect, read_authkey(os.environ))
    except LinkError as exc:
        say(str(exc))
        return EXIT_LINK
    from gpuwatch.runner.session import EXIT_INTERRUPTED, run

    try:
        return run(link, workload_name=args.workload, device_spec=args.device,
                   max_steps=args.max_steps, seed=args.seed)
    except KeyboardInterrupt:  # Ctrl-C while torch imports (started by hand)
        say("interrupted")
        return EXIT_INTERRUPTED
