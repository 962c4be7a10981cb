"""A torch-free runner that sends exactly what a test wrote, valid or not.

Started by a Session through a wrapper "interpreter" (``scripted_python`` in the tests that use
it) in place of ``python -c BOOT ...``. It connects with the key gpuwatch gives a runner, then
plays the JSON list of actions in the file named by ``$GPUWATCH_SCRIPTED_ACTIONS``:

  ``{"send": TEXT}``           one frame holding TEXT as is (no validation at all)
  ``{"steps": [FIRST, N]}``    N good steps with ids FIRST.., 10 µs each, ending now
  ``{"header": SIZE}``         a frame header announcing SIZE bytes, and nothing after it

Then it waits for ``stop``, answers ``bye`` and exits 0; it exits 0 when the link closes.
"""

from __future__ import annotations

import contextlib
import json
import os
import struct
import sys
import threading
import time
from multiprocessing.connection import Client

N_MARKS = 7


def read_key(args: list[str]) -> bytes:
    """The key as the real runner reads it: on stdin when asked to, else the environment."""
    if "--authkey-stdin" in args:
        return bytes.fromhex(sys.stdin.readline().strip())
    return bytes.fromhex(os.environ["GPUWATCH_AUTHKEY"])


def good_steps(first: int, count: int) -> bytes:
    now = time.perf_counter_ns()
    rows = [[now - (count - i) * 10_000 + j * 1_000 for j in range(N_MARKS)] for i in range(count)]
    return json.dumps(
        {
            "kind": "steps",
            "step": list(range(first, first + count)),
            "config": [0] * count,
            "samples": [1] * count,
            "host": rows,
        }
    ).encode()


def main() -> int:
    args = sys.argv[1:]
    address = args[args.index("--connect") + 1]
    with open(os.environ["GPUWATCH_SCRIPTED_ACTIONS"], encoding="utf-8") as f:
        actions = json.load(f)
    conn = Client(address, authkey=read_key(args))
    stop = threading.Event()

    def read() -> None:
        while True:
            try:
                message = json.loads(conn.recv_bytes())
            except (EOFError, OSError):
                os._exit(0)  # the GUI is gone
            if message.get("kind") == "stop":
                stop.set()

    threading.Thread(target=read, daemon=True).start()
    for action in actions:
        if "send" in action:
            conn.send_bytes(action["send"].encode())
        elif "steps" in action:
            conn.send_bytes(good_steps(*action["steps"]))
        elif "header" in action:
            os.write(conn.fileno(), struct.pack("!i", action["header"]))
    stop.wait()
    with contextlib.suppress(OSError):  # the GUI may have closed the link already
        conn.send_bytes(json.dumps({"kind": "bye", "reason": "stopped"}).encode())
    conn.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
