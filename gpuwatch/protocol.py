"""Wire messages between the runner (training process) and the GUI process.

Both sides import this module, so it depends on the standard library only. Messages are
JSON objects sent with ``Connection.send_bytes`` and read with ``recv_bytes``: never
pickle, because ``Connection.recv()`` unpickles whatever a peer sends.

Every message carries ``kind``. ``hello`` also carries ``protocol`` (``PROTOCOL_VERSION``);
a mismatch is reported to the user instead of guessing at fields.

Step timing is columnar (lists per field) so one message holds many steps. A step has
``len(MARKS)`` boundary marks in ``perf_counter_ns``; phase ``PHASES[i]`` spans
``[marks[i], marks[i + 1]]``. The step ends at its last mark; any time until the next step's
first mark is ``other`` (loop overhead outside the instrumented phases).
"""

from __future__ import annotations

import itertools
import json
import math
from typing import Any

PROTOCOL_VERSION = 1

#: Runner option: read the hex authkey from the first line of stdin (how gpuwatch starts it:
#: never on argv, where other users see it, nor in the environment, which stays readable in
#: ``/proc/PID/environ`` for the process's lifetime).
AUTHKEY_STDIN_FLAG = "--authkey-stdin"
#: Environment variable that carries the hex authkey to a runner started by hand.
AUTHKEY_ENV = "GPUWATCH_AUTHKEY"
#: Runner option: read the hex authkey from this file (a rank started by torchrun: its stdin is
#: the launcher's, which is the null device by then). The file is in the run's private folder
#: (0700 on POSIX, the user's temp folder on Windows) and readable by its owner only.
AUTHKEY_FILE_FLAG = "--authkey-file"
#: Runner option: this process is one rank of a distributed job; its identity comes from the
#: environment torchrun gives every rank (``RANK``, ``LOCAL_RANK``, ``WORLD_SIZE``).
AS_RANK_FLAG = "--as-rank"
#: Modules that start ranks (``python -m torch.distributed.run``, what ``torchrun`` runs): the
#: runner instruments the ranks they start instead of the launcher itself.
TORCHRUN_MODULES: tuple[str, ...] = ("torch.distributed.run",)
#: ``hello.role`` of the process that starts ranks but trains nothing (``TORCHRUN_MODULES``);
#: every other runner trains (no ``role``, or ``"rank"`` with ``hello.rank``).
ROLE_LAUNCHER = "launcher"
ROLE_RANK = "rank"


def boot_code(root: str) -> str:
    """``python -c`` source that runs ``gpuwatch.runner`` from the folder ``root``.

    The script a runner watches must see the environment and ``sys.path`` of a plain
    ``python SCRIPT`` (docs/design.md, Lifecycle), so nothing goes on ``PYTHONPATH``: the
    boot puts ``root`` in front of ``sys.path`` to import our ``gpuwatch`` package, and for
    a script the runner moves it to the end before anything else is imported
    (``gpuwatch.runner.script_environment.settle_source_root``). A built-in workload keeps it
    in front, so its forkserver/spawn workers import the same ``gpuwatch`` as the runner.
    Both sides build it: the GUI for the runner, a launcher runner for the ranks it starts.
    """
    return (
        f"import sys; sys.path.insert(0, {root!r}); "
        f"from gpuwatch.runner.cli import main; sys.exit(main(source_root={root!r}))"
    )


#: ``error`` type of a training Python that cannot import torch: the GUI says "could not be
#: run" (as for a missing script), not "the script raised".
TORCH_MISSING = "TorchMissing"

#: A message larger than this is dropped with a logged error (the link stays up).
MAX_MESSAGE_BYTES = 4 * 1024 * 1024
#: Hard limit given to ``recv_bytes(maxlength=...)``: beyond it the link itself is broken.
HARD_MESSAGE_BYTES = 64 * 1024 * 1024
#: Integers a message may carry: signed 64-bit (what the step rings and SQLite store).
INT_MIN = -(1 << 63)
INT_MAX = (1 << 63) - 1
#: An integer literal with at most this many characters always fits (checked without a bound).
_SAFE_INT_DIGITS = 18
#: Every digit read as "0", and a run of digits too long to be safe: what ``decode`` looks for.
_DIGITS_AS_ZERO = bytes.maketrans(b"123456789", b"000000000")
_LONG_DIGITS = b"0" * (_SAFE_INT_DIGITS + 1)
#: The runner ships step batches at most this often.
BATCH_INTERVAL_S = 0.05

#: Host phases in step order; ``other`` is the untracked rest (see module docstring).
PHASES: tuple[str, ...] = ("data", "h2d", "forward", "backward", "optimizer", "sync")
ALL_PHASES: tuple[str, ...] = (*PHASES, "other")
#: Boundary marks: ``MARKS[i]`` starts ``PHASES[i]``; the last one ends the step.
MARKS: tuple[str, ...] = (
    "start",
    "data_end",
    "h2d_end",
    "forward_end",
    "backward_end",
    "optimizer_end",
    "end",
)
N_MARKS = len(MARKS)
#: The device is given work between these marks (h2d .. optimizer). The data phase enqueues
#: nothing and the sync phase only waits, so a device span over them would count idle time
#: as active. "Stream active" per step is therefore [marks[ACTIVE_FIRST], marks[ACTIVE_LAST]].
ACTIVE_FIRST = MARKS.index("data_end")
ACTIVE_LAST = MARKS.index("optimizer_end")

#: ``capture {steps}`` accepts 1..MAX_CAPTURE_STEPS steps (a longer window perturbs more steps
#: and its event list outgrows the message cap). The runner profiles one extra warm-up step
#: first (``kernels.perturbed``), so the recorded steps do not pay the profiler's start-up.
MAX_CAPTURE_STEPS = 50
#: Kinds of a ``kernels`` message's events (its ``type`` column holds indices into this).
KERNEL_KINDS: tuple[str, ...] = ("kernel", "memcpy", "memset", "cpu_op")
#: ``kernels.status``: ``ok`` (events follow), ``refused`` (bad or overlapping request) or
#: ``failed`` (the profiler could not start or be read, e.g. another CUPTI user such as Nsight);
#: the last two carry ``error``, one sentence. Training goes on in every case.
CAPTURE_STATUSES: tuple[str, ...] = ("ok", "refused", "failed")

#: Built-in workloads (no downloads: their data is generated). Here because the GUI must offer
#: them without importing the runner; the tests check the runner's registry against this list.
WORKLOADS: tuple[str, ...] = ("vision", "mlp", "gpt")

RUNNER_KINDS = frozenset(
    {
        "hello",
        "knobs",
        "steps",
        "device_marks",
        "kernels",
        "config",
        "refused",
        "log",
        "error",
        "bye",
        "device",
        "collective",
        "pong",
    }
)
GUI_KINDS = frozenset({"set", "capture", "pause", "resume", "stop", "ping"})

#: Knob schema types and groups (docs/knobs.md §2).
KNOB_TYPES = ("bool", "int", "float", "choice")
KNOB_GROUPS = ("loader", "copies", "precision", "layout", "kernels", "loop", "demo", "script")
#: Every built-in workload knob's name, in display order (the runner's ``knobs.KNOBS`` defines
#: each one): ``gpuwatch bench`` refuses any other name before it starts a runner.
BUILTIN_KNOB_NAMES: tuple[str, ...] = (
    "num_workers",
    "pin_memory",
    "persistent_workers",
    "prefetch_factor",
    "batch_size",
    "non_blocking",
    "amp",
    "tf32",
    "channels_last",
    "cudnn_benchmark",
    "compile",
    "log_every",
    "zero_grad_set_to_none",
    "optimizer_impl",
    "storage_latency_ms",
    "augment_cost",
)

#: Fields each kind must carry, with their JSON types. Extra fields are allowed (forward
#: compatibility); missing or mistyped required ones make the message malformed.
REQUIRED: dict[str, dict[str, type | tuple[type, ...]]] = {
    "hello": {
        "protocol": int,
        "pid": int,
        "workload": str,
        "device": dict,
        "versions": dict,
        "knobs": list,
        "config": dict,
    },
    "steps": {"step": list, "config": list, "samples": list, "host": list},
    "device_marks": {"step": list, "device": list},
    # A watched script's CUDA device, named once it is known (its first step): hello's device
    # was ``pending`` because reading it earlier would have started CUDA before the script.
    "device": {"device": dict},
    # A capture window, columnar (docs/design.md "Kernel capture" lists every column).
    "kernels": {
        "status": str,
        "steps": list,
        "perturbed": list,
        "names": list,
        "type": list,
        "name": list,
        "stream": list,
        "start": list,
        "end": list,
    },
    # A collective's time as the training framework measured it (``source``: ``ddp``, the
    # reducer's own sample of an iteration): first bucket's all-reduce launched to the last done.
    "collective": {"source": str, "iteration": int, "comm_ns": int},
    "config": {
        "id": int,
        "values": dict,
        "changed": dict,
        "t_ns": int,
        "first_step": int,
        "warmup_steps": int,
    },
    "refused": {"values": dict, "message": str},
    # The full knob schema again, when it grows mid-run (a script's gpuwatch.probe.knob()).
    "knobs": {"knobs": list, "values": dict},
    # ``off`` (optional, str): an instrument of a watched script failed and switched itself off
    # (runner/instrument_switch.py); ``text`` says what is no longer measured and why, once.
    "log": {"level": str, "text": str},
    "error": {"type": str, "message": str},
    "bye": {"reason": str},
    # A clock round trip to a rank on another machine: ``t`` is the window's perf_counter_ns,
    # echoed in the answer with the rank's own (``clock_ns``) at the moment the ping was read.
    "ping": {"t": int},
    "pong": {"t": int, "clock_ns": int},
    "set": {"values": dict},
    "capture": {"steps": int},
    "pause": {},
    "resume": {},
    "stop": {},
}


class ProtocolError(ValueError):
    """A message that must be dropped: malformed, oversized, or of an unknown kind."""


def encode(kind: str, **fields: Any) -> bytes:
    """Serialize one message; raises ProtocolError rather than send something invalid."""
    message = {"kind": kind, **fields}
    _checked(message)
    try:
        data = json.dumps(message, separators=(",", ":"), allow_nan=False).encode()
    except (TypeError, ValueError) as exc:
        raise ProtocolError(f"cannot encode {kind!r}: {exc}") from exc
    if len(data) > MAX_MESSAGE_BYTES:
        raise ProtocolError(f"{kind!r} message of {len(data)} bytes exceeds {MAX_MESSAGE_BYTES}")
    return data


def decode(data: bytes, *, allowed: frozenset[str] | None = None) -> dict[str, Any]:
    """Parse and validate one message; ``allowed`` restricts the kinds this side accepts."""
    if len(data) > MAX_MESSAGE_BYTES:
        raise ProtocolError(f"message of {len(data)} bytes exceeds {MAX_MESSAGE_BYTES}")
    # Only a literal of more than ``_SAFE_INT_DIGITS`` digits can be out of range: without
    # one (every step batch: its marks have 13-16 digits) no literal needs a check of ours.
    bounded = _bounded_int if data.translate(_DIGITS_AS_ZERO).find(_LONG_DIGITS) >= 0 else None
    try:
        message = json.loads(
            data, parse_constant=_reject_constant, parse_int=bounded, parse_float=_finite_float
        )
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        raise ProtocolError(f"not JSON: {exc}") from exc
    message = _checked(message)
    if allowed is not None and message["kind"] not in allowed:
        raise ProtocolError(f"unexpected message kind {message['kind']!r}")
    return message


def _reject_constant(name: str) -> float:
    raise ProtocolError(f"non-finite number {name} in message")


def _bounded_int(text: str) -> int:
    """Every integer a message carries fits a signed 64-bit column (the step rings, SQLite):
    a bigger one is refused here, with the message, instead of failing wherever it is stored.
    """
    if len(text) <= _SAFE_INT_DIGITS:
        return int(text)
    # No int() of a long literal: past 4,300 digits it raises ValueError, not ours.
    value = int(text) if len(text) <= 20 else None
    if value is None or not INT_MIN <= value <= INT_MAX:
        raise ProtocolError(f"integer {_abbreviated(text)} is outside the signed 64-bit range")
    return value


def _finite_float(text: str) -> float:
    """``1e400`` parses as infinity without ever reaching ``parse_constant``: refuse it too."""
    value = float(text)
    if not math.isfinite(value):
        raise ProtocolError(f"number {_abbreviated(text)} is out of range (not finite)")
    return value


def _abbreviated(text: str, limit: int = 40) -> str:
    return text if len(text) <= limit else f"{text[:limit]}… ({len(text)} digits)"


#: Longest error texts an ``error`` message carries: a script's exception can hold megabytes
#: (a whole tensor printed), and the message must still fit ``MAX_MESSAGE_BYTES``.
MAX_ERROR_MESSAGE_CHARS = 16 * 1024
MAX_TRACEBACK_CHARS = 64 * 1024
MAX_TRACEBACK_LINE_CHARS = 2 * 1024


def fit_error(fields: dict[str, Any]) -> dict[str, Any]:
    """An ``error`` message's fields with an over-long ``message`` and ``traceback`` cut (and
    saying so), keeping the type and every frame line of the traceback."""
    out = dict(fields)
    message = out.get("message")
    if isinstance(message, str):
        out["message"] = shorten(message, MAX_ERROR_MESSAGE_CHARS)
    trace = out.get("traceback")
    if isinstance(trace, str):
        lines = [
            shorten(line, MAX_TRACEBACK_LINE_CHARS) for line in trace.splitlines(keepends=True)
        ]
        out["traceback"] = shorten("".join(lines), MAX_TRACEBACK_CHARS)
    return out


def shorten(text: str, limit: int) -> str:
    """``text`` if it has at most ``limit`` characters, else its head and tail around a note
    saying how much was cut (the tail of a traceback names the exception)."""
    if len(text) <= limit:
        return text
    keep = max(0, limit - 60) // 2
    cut = len(text) - 2 * keep
    return f"{text[:keep]} … [{cut:,} characters cut by gpuwatch] … {text[len(text) - keep :]}"


def _checked(message: object) -> dict[str, Any]:
    """``message`` itself once it is an object with its kind's fields, else ``ProtocolError``."""
    if not isinstance(message, dict):
        raise ProtocolError("message is not a JSON object")
    kind = message.get("kind")
    if kind not in REQUIRED:
        raise ProtocolError(f"unknown message kind {kind!r}")
    for field, typ in REQUIRED[kind].items():
        value = message.get(field)
        if not isinstance(value, typ) or (isinstance(value, bool) and typ is int):
            raise ProtocolError(
                f"{kind!r} message: field {field!r} missing or not {getattr(typ, '__name__', typ)}"
            )
    if kind == "steps":
        _check_steps(message)
    elif kind == "device_marks":
        _check_columns(message, ("step", "device"))
        _check_mark_rows(message["device"], "device")
    elif kind == "kernels":
        _check_columns(message, ("type", "name", "stream", "start", "end"))
    return message


def _check_steps(message: dict[str, Any]) -> None:
    columns = ["step", "config", "samples", "host"]
    if "instrument_ns" in message:  # optional: the runner's instruments' own time per step
        if not isinstance(message["instrument_ns"], list):
            raise ProtocolError("'steps' message: 'instrument_ns' must be a list")
        columns.append("instrument_ns")
    _check_columns(message, tuple(columns))
    for field in ("step", "config", "samples", "instrument_ns"):
        if field in message and not _plain_ints(message[field]):
            raise ProtocolError(f"'steps' message: {field!r} must hold integers")
    _check_mark_rows(message["host"], "host")


def _plain_ints(values: list[Any]) -> bool:
    """Every value an ``int`` (``bool`` is not): one pass in C, as step batches are checked
    on both sides of the link on every send."""
    return set(map(type, values)) <= {int}


def _check_columns(message: dict[str, Any], fields: tuple[str, ...]) -> None:
    lengths = {len(message[f]) for f in fields}
    if len(lengths) != 1:
        raise ProtocolError(f"{message['kind']!r} message: columns differ in length")


def _check_mark_rows(rows: list[Any], field: str) -> None:
    if not (
        set(map(type, rows)) <= {list}
        and set(map(len, rows)) <= {N_MARKS}
        and _plain_ints(list(itertools.chain.from_iterable(rows)))
    ):
        raise ProtocolError(f"{field!r} rows must be {N_MARKS} integer marks")


def finite_or_none(value: float | None) -> float | None:
    """JSON has no NaN/inf: map them to null so a missing figure never reads as 0."""
    if value is None or not math.isfinite(value):
        return None
    return value
