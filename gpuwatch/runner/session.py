"""Everything after the link is up: import torch, pick the device, say hello, train, say bye.

Torch is imported here, after connecting, so a GUI that goes away during the (seconds-long)
import still finds the runner reacting, and argument or link errors never pay for it.
"""

from __future__ import annotations

import importlib.metadata
import os
import platform
import sys
import time
import traceback
from collections.abc import Callable
from typing import Any

from gpuwatch.protocol import PROTOCOL_VERSION
from gpuwatch.runner.availability import knob_schema
from gpuwatch.runner.follow_device import FollowDevice
from gpuwatch.runner.knobs import initial_warmup
from gpuwatch.runner.link import Link
from gpuwatch.runner.nvtx_ranges import NvtxPhases
from gpuwatch.runner.survey import cuda_device
from gpuwatch.runner.timing import CudaEventBackend, HostBackend, TimingBackend
from gpuwatch.runner.worker_start import warm_up
from gpuwatch.runner.workloads import load_workload

EXIT_OK = 0
EXIT_TRAINING = 1
EXIT_USAGE = 2
EXIT_LINK = 3
#: A run interrupted by Ctrl-C (started by hand, outside the GUI), as shells expect.
EXIT_INTERRUPTED = 130


class DeviceError(ValueError):
    """The requested device does not exist here (a usage error: exit code 2)."""


def say(text: str) -> None:
    """The one line a failure prints on stderr."""
    sys.stderr.write(f"gpuwatch runner: {text}\n")
    sys.stderr.flush()


def resolve_device(torch: Any, spec: str) -> Any:
    """``auto`` is the first CUDA device when there is one, else the CPU."""
    cuda = torch.cuda.is_available()
    if spec == "auto":
        return torch.device("cuda", 0) if cuda else torch.device("cpu")
    if spec == "cpu":
        return torch.device("cpu")
    if not cuda:
        raise DeviceError(f"--device {spec}: CUDA is not available to torch {torch.__version__}")
    index = 0 if spec == "cuda" else int(spec.partition(":")[2])
    count = torch.cuda.device_count()
    if index >= count:
        raise DeviceError(f"--device {spec}: this machine has {count} CUDA device(s)")
    return torch.device("cuda", index)


def script_device(torch: Any, spec: str) -> Any:
    """The device a watched script is announced on, without starting CUDA.

    ``torch.cuda.device_count()`` asks NVML before CUDA is initialized (torch's
    ``_device_count_nvml``; it falls back to ``cudaGetDeviceCount`` only where NVML fails),
    whereas ``is_available()`` runs ``cuInit``, after which the ``CUDA_VISIBLE_DEVICES`` a
    script sets is ignored. ``cuda`` and ``auto`` give ``cuda`` without an index: the device
    is the one the script makes current, known at its first step."""
    if spec == "cpu":
        return torch.device("cpu")
    count = torch.cuda.device_count()
    if spec == "auto":
        return torch.device("cuda") if count > 0 else torch.device("cpu")
    if count <= 0:
        raise DeviceError(f"--device {spec}: CUDA is not available to torch {torch.__version__}")
    if spec == "cuda":
        return torch.device("cuda")
    index = int(spec.partition(":")[2])
    if index >= count:
        raise DeviceError(f"--device {spec}: this machine has {count} CUDA device(s)")
    return torch.device("cuda", index)


def usable_cores() -> int:
    """CPU cores this process may run on (its affinity mask where the OS has one)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def configure_threads(torch: Any, device: Any) -> int:
    """Intra-op threads for a CPU device: half the usable cores, at least one.

    On a CPU device the model, the main-process data pipeline and the DataLoader workers all
    share the same cores. Leaving half of them to data
    loading avoids oversubscription and keeps the input-bound demo honest; a 2-core machine
    trains on 1 thread. On CUDA the host mostly launches kernels: torch's default is kept.
    """
    if device.type == "cpu":
        torch.set_num_threads(max(1, usable_cores() // 2))
    threads: int = torch.get_num_threads()
    return threads


def cpu_name() -> str:
    """A readable CPU model name (``platform.processor()`` is empty on Linux)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("model name"):
                    return line.partition(":")[2].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "CPU"


def device_info(torch: Any, device: Any) -> dict[str, Any]:
    """``hello["device"]``: what the GUI needs to find the matching NVML device, and the usable
    CPU cores (the scale of the CPU analog of utilization). A CUDA device without an index is
    a script's device before its first step (reading its properties would start CUDA):
    ``pending``, named by a ``device`` message once the script has chosen it."""
    if device.type == "cuda" and device.index is None:
        return {
            "kind": "cuda",
            "index": None,
            "name": "CUDA (the script's device, named at its first step)",
            "uuid": None,
            "pci_bus_id": None,
            "driver_model": None,
            "pending": True,
            "cores": usable_cores(),
        }
    if device.type == "cuda":
        info = cuda_device(torch, device.index)
        return {
            "kind": "cuda",
            "index": device.index,
            "name": info["name"],
            "uuid": info["uuid"],
            "pci_bus_id": info["pci_bus_id"],
            "driver_model": None,  # torch cannot tell WDDM from TCC; NVML can
            "capability": info["capability"],
            "total_memory": info["total_memory"],
            "cores": usable_cores(),
        }
    return {
        "kind": "cpu",
        "index": None,
        "name": cpu_name(),
        "uuid": None,
        "pci_bus_id": None,
        "driver_model": None,
        "cores": usable_cores(),
    }


def versions(torch: Any) -> dict[str, str | None]:
    """Versions for ``hello``. torchvision's comes from its package metadata: importing it
    would pull in ``torch._dynamo`` (3-5 s of every runner's start here) for one string (the
    metadata lacks a local build tag such as ``+cu130``; torch's own version keeps it)."""
    try:
        vision: str | None = importlib.metadata.version("torchvision")
    except importlib.metadata.PackageNotFoundError:
        vision = None
    return {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "torchvision": vision,
        "cuda": torch.version.cuda,
    }


def make_backend(torch: Any, device: Any) -> TimingBackend:
    """CUDA events (and NVTX phase ranges) on a CUDA device; on a CPU host marks are the
    device truth."""
    if device.type == "cuda":
        torch.cuda.set_device(device)  # events are recorded on this device's current stream
        return NvtxPhases(CudaEventBackend(device=device.index))
    return HostBackend()


def make_script_backend(
    torch: Any, device: Any, *, notify: Callable[[str], None], on_device: Callable[[int], None]
) -> TimingBackend:
    """A watched script's backend: on CUDA it starts nothing until the script's first step
    (``FollowDevice``); on a CPU host marks are the device truth."""
    if device.type == "cuda":
        return NvtxPhases(FollowDevice(torch, notify=notify, on_device=on_device))
    return HostBackend()


def run(
    link: Link, *, workload_name: str, device_spec: str, max_steps: int | None, seed: int
) -> int:
    """Train over an open link until stop/max-steps/link loss; returns the exit code."""
    try:
        import torch

        workload_cls = load_workload(workload_name)
    except Exception as exc:  # e.g. a torch DLL that does not load
        return _failed(link, exc, "cannot import torch/torchvision", EXIT_TRAINING)
    try:
        device = resolve_device(torch, device_spec)
    except DeviceError as exc:
        return _failed(link, exc, str(exc), EXIT_USAGE)
    try:
        return _train(link, torch, workload_cls, device, max_steps=max_steps, seed=seed)
    except KeyboardInterrupt:
        _finish(link, "stopped")
        return EXIT_INTERRUPTED
    except Exception as exc:  # the user's traceback goes to the GUI
        return _failed(link, exc, "training failed", EXIT_TRAINING)


def _train(
    link: Link, torch: Any, workload_cls: Any, device: Any, *, max_steps: int | None, seed: int
) -> int:
    """Model, optimizer and knob checks first (a second or two, mostly the first optimizer
    importing ``torch._dynamo``), so ``hello``, the first message, carries the checked schema;
    then the dataset (seconds), announced by its own log line."""
    from gpuwatch.runner.loop import TrainingLoop  # imports torch (its batch sampler)
    from gpuwatch.runner.training_state import TrainingState  # imports torch

    threads = configure_threads(torch, device)
    workload = workload_cls(seed=seed, torch_threads=threads)

    def info(text: str) -> None:
        link.log("info", text)

    started = time.perf_counter()
    model = workload.build_model(device)
    state = TrainingState(
        workload,
        model=model,
        optimizer=workload.build_optimizer(model),
        device=device,
        values=workload.knob_values(),
    )
    checking = time.perf_counter()
    schema = knob_schema(torch, workload, device)
    checked_s = time.perf_counter() - checking
    link.send(
        "hello",
        protocol=PROTOCOL_VERSION,
        pid=os.getpid(),
        workload=workload.name,
        device=device_info(torch, device),
        versions=versions(torch),
        os=platform.platform(),
        knobs=schema.as_hello(),
        config={
            "id": 0,
            "values": dict(state.values),
            "warmup_steps": initial_warmup(state.values),
        },
        workload_config=workload.parameters(),
        timing="cuda_events" if device.type == "cuda" else "host",
        batch_size=state.values["batch_size"],
    )
    info(
        f"training on {device} with {threads} intra-op thread(s); knobs checked in "
        f"{checked_s:.2f} s"
    )
    # The workers' fork server imports torch and the workload while the dataset is built,
    # so a later num_workers change starts its workers in milliseconds (worker_start).
    if warm_up(("torch", type(workload).__module__)):
        info("DataLoader workers: forkserver (torch preloaded while the dataset is built)")
    workload.prepare(info)
    parameters = sum(p.numel() for p in model.parameters())
    info(
        f"ready in {time.perf_counter() - started:.1f} s: {type(model).__name__} with "
        f"{parameters:,} parameters, {type(state.optimizer).__name__}"
    )
    backend = make_backend(torch, device)
    events = backend.inner if isinstance(backend, NvtxPhases) else backend
    if isinstance(events, CudaEventBackend):
        info(f"CUDA event clock anchored to perf_counter_ns (±{events.bracket_ns / 1e3:.1f} µs)")
    loop = TrainingLoop(
        workload, state=state, schema=schema, backend=backend, link=link, max_steps=max_steps
    )
    reason = loop.run()
    backend.close()
    _finish(link, reason)
    return EXIT_OK


def _finish(link: Link, reason: str) -> None:
    if reason != "link_closed":
        link.send("bye", reason=reason)
    link.finished()
    link.close()


def _failed(link: Link, exc: BaseException, summary: str, code: int) -> int:
    link.send(
        "error",
        type=type(exc).__name__,
        message=str(exc),
        traceback="".join(traceback.format_exception(exc)),
    )
    _finish(link, "error")
    say(f"{summary}: {type(exc).__name__}: {exc}" if summary != str(exc) else summary)
    return code
