"""A stand-in runner without torch: it speaks (and breaks) the link protocol on purpose.

Started by a Session through a wrapper "interpreter" (``conftest.fake_python``) as
``fake_runner.py -m gpuwatch.runner --connect ADDRESS --workload MODE ...``: the workload name
(or ``$GPUWATCH_FAKE_MODE``, for script mode) picks what it does. Starts in a fraction of a
second, so link faults and load are cheap to test.

Modes:
  ``v99``      hello with protocol 99, then waits for stop.
  ``garbage``  hello, then not-JSON, wrong types, an unknown kind, a GUI-only kind, an
               oversized message and a flood of 20,000 junk messages; then 10 good steps.
  ``rate:N``   hello, then N steps/s in 50 ms batches until stopped.
  ``truncated`` hello, 5 steps, then half of a message's bytes and exit 0.
Every mode answers ``stop`` with ``bye`` and exits 0, and exits 0 when the link closes.
"""

from __future__ import annotations

import json
import os
import struct
import sys
import threading
import time
from multiprocessing.connection import Client

PROTOCOL_VERSION = 1
N_MARKS = 7
MAX_MESSAGE_BYTES = 4 * 1024 * 1024


def send(conn, kind: str, **fields) -> None:
    conn.send_bytes(json.dumps({"kind": kind, **fields}).encode())


def hello(conn, protocol: int = PROTOCOL_VERSION) -> None:
    send(
        conn,
        "hello",
        protocol=protocol,
        pid=os.getpid(),
        workload="fake",
        device={"kind": "cpu", "name": "fake CPU", "cores": 1},
        versions={"python": "3"},
        knobs=[],
        config={"id": 0, "values": {}, "warmup_steps": 0},
        batch_size=1,
    )


def steps(conn, first: int, count: int) -> None:
    """``count`` steps of 10 µs each (1 µs per phase), ending now."""
    now = time.perf_counter_ns()
    rows = [[now - (count - i) * 10_000 + j * 1_000 for j in range(N_MARKS)] for i in range(count)]
    send(
        conn,
        "steps",
        step=list(range(first, first + count)),
        config=[0] * count,
        samples=[1] * count,
        host=rows,
    )


def garbage(conn) -> None:
    conn.send_bytes(b"{not json")
    conn.send_bytes(b"\xff\xfe binary")
    conn.send_bytes(b"[1, 2, 3]")
    conn.send_bytes(
        json.dumps({"kind": "steps", "step": "1", "config": [], "samples": [], "host": []}).encode()
    )
    conn.send_bytes(json.dumps({"kind": "log", "level": 3, "text": None}).encode())
    conn.send_bytes(json.dumps({"kind": "launch_missiles"}).encode())
    conn.send_bytes(json.dumps({"kind": "stop"}).encode())  # a GUI-only kind
    conn.send_bytes(b"{" + b" " * (MAX_MESSAGE_BYTES + 1) + b"}")
    for i in range(20_000):
        conn.send_bytes(b'{"kind": "steps", "step": [%d]}' % i)


def main() -> int:
    args = sys.argv[1:]
    address = args[args.index("--connect") + 1]
    mode = os.environ.get("GPUWATCH_FAKE_MODE") or args[args.index("--workload") + 1]
    key = (
        sys.stdin.readline()
        if "--authkey-stdin" in args  # how gpuwatch passes it
        else os.environ["GPUWATCH_AUTHKEY"]
    )
    conn = Client(address, authkey=bytes.fromhex(key.strip()))
    stop = threading.Event()
    lock = threading.Lock()

    def read() -> None:
        while True:
            try:
                message = json.loads(conn.recv_bytes())
            except (EOFError, OSError):
                os._exit(0)  # the GUI is gone
            if message.get("kind") == "stop":
                stop.set()

    threading.Thread(target=read, daemon=True).start()
    hello(conn, protocol=99 if mode == "v99" else PROTOCOL_VERSION)
    if mode == "garbage":
        garbage(conn)
        steps(conn, 0, 10)
    elif mode == "truncated":
        steps(conn, 0, 5)
        payload = json.dumps({"kind": "log", "level": "info", "text": "x" * 100}).encode()
        os.write(conn.fileno(), struct.pack("!i", len(payload)) + payload[:40])
        return 0
    elif mode.startswith("rate:"):
        per_batch = max(1, int(mode[5:]) // 20)
        step = 0
        while not stop.is_set():
            with lock:
                steps(conn, step, per_batch)
            step += per_batch
            time.sleep(0.05)
    stop.wait()
    send(conn, "bye", reason="stopped")
    conn.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
