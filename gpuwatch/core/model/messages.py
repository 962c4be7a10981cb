"""Typed forms of the runner's messages that the rest of the GUI side keeps and passes around.

The wire format is ``gpuwatch.protocol``; these are what a message means once it is read: a
configuration that was applied, a change the runner refused, the state of a run, and the
events a run model hands its listeners when one of those rare things changes.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

#: Transition steps of config 0 when a hello does not say (a recording made before the runner
#: sent ``config.warmup_steps``): generous on purpose, as leaving a few settled steps out of a
#: scoreboard row costs less than counting a loader's start-up in it. A recording's own
#: ``configs`` table, when it has config 0, gives the value the live window used instead.
DEFAULT_WARMUP_STEPS = 10


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _mapping(value: Any, what: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ValueError(f"hello {what} is not an object: {value!r}")
    return value


@dataclass(frozen=True)
class DeviceInfo:
    """``hello.device`` (or a ``device`` message): what the run trains on.

    ``pending`` is a watched script's CUDA device before its first step (named later by a
    ``device`` message). ``cores`` is the runner's usable CPU cores as sent (may be absent or
    nonsense): read it through ``core_count``.
    """

    kind: str = "cpu"
    name: str | None = None
    index: int | None = None
    uuid: str | None = None
    pci_bus_id: str | None = None
    pending: bool = False
    cores: Any = None
    #: The object as the runner sent it (extra fields kept for diagnostics and recordings).
    raw: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def from_message(cls, device: Any) -> DeviceInfo:
        device = _mapping(device, "device")
        return cls(
            kind=_text(device.get("kind")) or "cpu",
            name=_text(device.get("name")),
            index=_int(device.get("index")),
            uuid=_text(device.get("uuid")),
            pci_bus_id=_text(device.get("pci_bus_id")),
            pending=device.get("pending") is True,
            cores=device.get("cores"),
            raw=dict(device),
        )

    def core_count(self, default: int = 1) -> int:
        """The runner's usable cores; ``default`` when it sent none or nonsense (a ``1e400``
        parses as infinity, which no int holds)."""
        cores = self.cores
        if (
            isinstance(cores, int | float)
            and not isinstance(cores, bool)
            and math.isfinite(cores)
            and cores >= 1
        ):
            return int(cores)
        return default

    def to_message(self) -> dict[str, Any]:
        """The wire form (what the runner sent, or what these fields say)."""
        return dict(self.raw) or {
            "kind": self.kind,
            "name": self.name,
            "index": self.index,
            "uuid": self.uuid,
            "pci_bus_id": self.pci_bus_id,
            "cores": self.cores,
        }


@dataclass(frozen=True)
class KnobSpec:
    """One entry of ``hello.knobs`` (docs/knobs.md §2), checked to have a name and a type.

    ``schema`` is the entry as the runner sent it: the knob panel and the value parser read
    its optional fields (label, help, choices, disabled choices, unit, group, rebuilds).
    """

    name: str
    type: str
    default: Any = None
    min: Any = None
    max: Any = None
    enabled: bool = True
    reason: str | None = None
    schema: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    def to_message(self) -> dict[str, Any]:
        """The schema entry as the runner sent it (or what these fields say)."""
        return dict(self.schema) or {
            "name": self.name,
            "type": self.type,
            "default": self.default,
            "min": self.min,
            "max": self.max,
            "enabled": self.enabled,
            "reason": self.reason,
        }

    @classmethod
    def from_message(cls, knob: Any) -> KnobSpec:
        knob = _mapping(knob, "knob")
        name, kind = knob.get("name"), knob.get("type")
        if not isinstance(name, str) or not isinstance(kind, str):
            raise ValueError(f"hello knob without a name and a type: {knob!r}")
        return cls(
            name=name,
            type=kind,
            default=knob.get("default"),
            min=knob.get("min"),
            max=knob.get("max"),
            enabled=bool(knob.get("enabled", True)),
            reason=_text(knob.get("reason")),
            schema=dict(knob),
        )


@dataclass(frozen=True)
class RankInfo:
    """``hello.rank``: which rank of a distributed job a runner is (torchrun's numbering)."""

    rank: int
    local_rank: int
    world_size: int
    node_rank: int = 0
    node: str = ""

    @classmethod
    def from_message(cls, value: Any) -> RankInfo | None:
        """None when ``value`` is not a rank (a single-process runner sends none)."""
        if not isinstance(value, dict):
            return None
        rank, local, world = (_int(value.get(k)) for k in ("rank", "local_rank", "world_size"))
        if rank is None or local is None or world is None or not 0 <= rank < world:
            return None
        return cls(
            rank=rank,
            local_rank=local,
            world_size=world,
            node_rank=_int(value.get("node_rank")) or 0,
            node=_text(value.get("node")) or "",
        )


@dataclass(frozen=True)
class CollectiveSample:
    """``collective``: one iteration's all-reduce as DDP timed it (the backward's first bucket
    launched to the last one done, the wait for the other ranks included), and when it
    arrived (the owner's clock)."""

    t_ns: int
    iteration: int
    comm_ns: int
    overlap_ns: int = 0
    source: str = "ddp"

    @classmethod
    def from_message(cls, message: dict[str, Any], t_ns: int) -> CollectiveSample:
        return cls(
            t_ns=t_ns,
            iteration=message["iteration"],
            comm_ns=message["comm_ns"],
            overlap_ns=_int(message.get("overlap_ns")) or 0,
            source=_text(message.get("source")) or "ddp",
        )

    def to_message(self) -> dict[str, Any]:
        """The sample as the message that brought it (a recording started mid-run)."""
        return {
            "kind": "collective",
            "source": self.source,
            "iteration": self.iteration,
            "comm_ns": self.comm_ns,
            "overlap_ns": self.overlap_ns,
        }


@dataclass(frozen=True)
class Hello:
    """The runner's ``hello``: who trains what, where, with which knobs (``gpuwatch.protocol``).

    Built once from the message by ``from_message``, which checks the fields every reader
    uses; ``raw`` keeps the message as sent (a recording stores it so). ``warmup_steps`` is
    config 0's transition (``hello.config.warmup_steps``; ``DEFAULT_WARMUP_STEPS`` if absent).
    """

    workload: str = ""
    device: DeviceInfo = field(default_factory=DeviceInfo)
    knobs: tuple[KnobSpec, ...] = ()
    config_values: dict[str, Any] = field(default_factory=dict)
    warmup_steps: int = DEFAULT_WARMUP_STEPS
    pid: int | None = None
    protocol: int | None = None
    versions: dict[str, Any] = field(default_factory=dict)
    timing: str = "host"
    os: str | None = None
    #: A built-in workload's batch size at the start (a script's is not known: None).
    batch_size: int | None = None
    #: A watched script's ``{"path", "args", "cwd"}`` (and ``"module"``, its name, for ``-m``),
    #: or None for a built-in workload.
    script: dict[str, Any] | None = None
    #: ``launcher`` for a process that starts ranks and trains nothing (torchrun), ``rank``
    #: for one of the ranks it starts, None for a single training process.
    role: str | None = None
    #: Which rank this runner is (``role`` ``rank``).
    rank: RankInfo | None = None
    raw: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def from_message(cls, message: dict[str, Any], *, warmup_steps: int | None = None) -> Hello:
        """Read a hello message; ``warmup_steps`` stands in when the message has none.

        Raises ``ValueError`` when a field every reader needs is missing or of the wrong type.
        """
        config = _mapping(message.get("config", {}), "config")
        values = config.get("values")
        sent_warmup = _int(config.get("warmup_steps"))
        if sent_warmup is None:
            sent_warmup = warmup_steps if warmup_steps is not None else DEFAULT_WARMUP_STEPS
        versions = message.get("versions")
        script = message.get("script")
        knobs = message.get("knobs", [])
        if not isinstance(knobs, list):
            raise ValueError(f"hello knobs is not a list: {knobs!r}")
        return cls(
            workload=_text(message.get("workload")) or "",
            device=DeviceInfo.from_message(message.get("device", {})),
            knobs=tuple(KnobSpec.from_message(k) for k in knobs),
            config_values=dict(values) if isinstance(values, dict) else {},
            warmup_steps=max(0, sent_warmup),
            pid=_int(message.get("pid")),
            protocol=_int(message.get("protocol")),
            versions=dict(versions) if isinstance(versions, dict) else {},
            timing=_text(message.get("timing")) or "host",
            os=_text(message.get("os")),
            batch_size=_int(message.get("batch_size")),
            script=dict(script) if isinstance(script, dict) else None,
            role=_text(message.get("role")),
            rank=RankInfo.from_message(message.get("rank")),
            raw=dict(message),
        )

    def to_message(self) -> dict[str, Any]:
        """The wire form of this hello as it stands (its device named, its knobs as kept)."""
        return {
            **self.raw,
            "kind": "hello",
            "device": self.device.to_message(),
            "knobs": [k.to_message() for k in self.knobs],
        }


@dataclass(frozen=True)
class ConfigChange:
    """One applied configuration (a ``config`` message; id 0 comes from ``hello.config``)."""

    id: int
    values: dict[str, Any]
    changed: dict[str, Any]
    t_ns: int
    first_step: int
    warmup_steps: int
    apply_s: float = 0.0
    rebuilt: tuple[str, ...] = ()
    request: int | None = None
    label: str = ""

    @classmethod
    def from_message(cls, message: dict[str, Any], label: str | None = None) -> ConfigChange:
        changed = dict(message["changed"])
        request = message.get("request")
        apply_s = message.get("apply_s")
        rebuilt = message.get("rebuilt")
        return cls(
            id=message["id"],
            values=dict(message["values"]),
            changed=changed,
            t_ns=message["t_ns"],
            first_step=message["first_step"],
            warmup_steps=max(0, message["warmup_steps"]),
            apply_s=float(apply_s)
            if isinstance(apply_s, int | float) and math.isfinite(apply_s)
            else 0.0,
            rebuilt=tuple(str(r) for r in rebuilt) if isinstance(rebuilt, list) else (),
            request=request if isinstance(request, int) else None,
            label=label or describe_change(changed),
        )


@dataclass(frozen=True)
class Refusal:
    """A ``set`` the runner did not apply; training went on unchanged."""

    request: int | None
    values: dict[str, Any]
    message: str
    t_ns: int


def format_value(value: Any) -> str:
    """A knob value as people read it: a boolean as on/off, anything else as ``str``."""
    if isinstance(value, bool):
        return "on" if value else "off"
    return str(value)


def describe_change(changed: dict[str, Any]) -> str:
    """``{"num_workers": 2, "pin_memory": True}`` → ``"num_workers=2, pin_memory=on"``."""
    return ", ".join(f"{k}={format_value(v)}" for k, v in changed.items()) or "no change"


class SessionState(enum.Enum):
    """Where a run is in its life: launched, connected, asked to stop, ended well or not."""

    IDLE = "idle"
    STARTING = "starting"
    RUNNING = "running"
    STOPPING = "stopping"
    FINISHED = "finished"
    FAILED = "failed"


#: States in which a runner process exists (or is being started or stopped).
ACTIVE_STATES = frozenset({SessionState.STARTING, SessionState.RUNNING, SessionState.STOPPING})


@dataclass(frozen=True)
class ConfigApplied:
    """The runner applied a configuration (a ``config`` message, or config 0 from hello)."""

    change: ConfigChange


@dataclass(frozen=True)
class ChangeRefused:
    """The runner refused a ``set``; training went on unchanged."""

    refusal: Refusal


class CapturedWindow(Protocol):
    """What a kernel capture window is, as a run model hands it to its listeners: the device
    it ran on, the steps it recorded and perturbed, and the time it spans (host
    ``perf_counter_ns``).

    ``gpuwatch.core.figures.kernel_window.KernelWindow`` is the window itself; its events and
    the figures they give belong to that layer, above this one. A listener that wants them
    reads the run's ``kernel_windows()``.
    """

    @property
    def device(self) -> str: ...

    @property
    def steps(self) -> tuple[int, ...]: ...

    @property
    def perturbed(self) -> tuple[int, ...]: ...

    @property
    def t0_ns(self) -> int: ...

    @property
    def t1_ns(self) -> int: ...


@dataclass(frozen=True)
class KernelWindowReady:
    """A kernel capture gave a window."""

    window: CapturedWindow


@dataclass(frozen=True)
class CaptureFailed:
    """A kernel capture ended without a window (refused or failed): ``error`` says why."""

    error: str


@dataclass(frozen=True)
class StateChanged:
    """The run's state changed, or its liveness did (no step yet, stalled, steps again).

    ``state`` is the state after the change; a liveness change keeps the same state and the
    listener reads the notice from the session.
    """

    state: SessionState


#: What a run model's listeners receive: one of the rare changes a view reacts to.
ModelEvent = ConfigApplied | ChangeRefused | KernelWindowReady | CaptureFailed | StateChanged
#: ``listener(event)``: called on the thread that folded the change (see ``RunModel``).
ModelListener = Callable[[ModelEvent], None]
