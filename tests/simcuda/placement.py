""" "cuda" tensors that are CPU tensors underneath, and the device work they cause.

A device tensor is a CPU tensor whose *storage* carries ``_simcuda_device`` (storages keep
their Python object, so views, ``param.data = ...``, ``nn.Parameter(t)`` and autograd's
gradients share the mark, and a freed storage takes it along). Numerics are the CPU's.

* ``DevicePlacement`` (a ``TorchFunctionMode``, main thread): rewrites ``device="cuda[:i]"`` of
  factories and the targets of ``.to()``/``.cuda()`` to the CPU and marks the result; answers
  ``.device``/``.is_cuda`` of a device tensor with its CUDA device; makes reading a device
  tensor on the host (``.item()``, ``.tolist()``, ``bool()``, ``.cpu()``, ``.to("cpu")``) a
  host wait, and ``.numpy()`` raise as torch does for a CUDA tensor.
* ``DeviceKernels`` (a ``TorchDispatchMode``, main thread): every ATen op that touches a device
  tensor (forward, autograd's backward, optimizer) enqueues a kernel on the current stream of
  that device, lasting the op's measured CPU time × ``kernel_factor``; view ops are free.
* Copies (torch ``aten/src/ATen/native/cuda/Copy.cu``): host→device from pinned memory with
  ``non_blocking=True`` is asynchronous; otherwise the host waits for the copy
  (``stream_synchronize``, which the sync debug mode reports). Device→host waits unless
  ``non_blocking``.
* ``Tensor.pin_memory``/``is_pinned`` are patched on the class (the DataLoader pins in its own
  thread, where these modes are not active).
"""

from __future__ import annotations

import threading
import time
import weakref
from typing import Any, ClassVar

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten, tree_map_only

from simcuda.cuda_api import gpu

DEVICE_ATTR = "_simcuda_device"
PINNED_ATTR = "_simcuda_pinned"
aten = torch.ops.aten

#: Ops that read a device value on the host (``at::cuda::memcpy_and_sync`` and friends).
SYNC_OPS = {
    aten._local_scalar_dense.default,
    aten.nonzero.default,
    aten.masked_select.default,
    aten.is_nonzero.default,
}
#: Metadata and allocation ops: no kernel.
FREE_OPS = {
    aten.detach.default,
    aten.empty.memory_format,
    aten.empty_like.default,
    aten.empty_strided.default,
    aten.alias.default,
    aten.lift_fresh.default,
    aten.set_.source_Storage_storage_offset,
    aten.set_.source_Tensor,
    aten.resize_.default,
    aten.result_type.Tensor,
    aten.result_type.Scalar,
    aten.is_same_size.default,
    aten.sym_size.int,
    aten.sym_stride.int,
}
#: Ops whose tensors may legitimately sit on different devices (they are the copies).
COPY_OPS = {
    aten.copy_.default,
    aten._to_copy.default,
    aten._copy_from.default,
    aten._copy_from_and_resize.default,
    aten.index.Tensor,
    aten.index_put_.default,
    aten.index_put.default,
    aten._index_put_impl_.default,
    aten.set_.source_Tensor,
}

_local = threading.local()


def device_of(tensor: Any) -> int | None:
    """The simulated CUDA device of ``tensor``, or None for a host tensor."""
    if not isinstance(tensor, torch.Tensor):
        return None
    try:
        storage = tensor.untyped_storage()
    except (RuntimeError, NotImplementedError):  # no storage (e.g. sparse, meta)
        return None
    return getattr(storage, DEVICE_ATTR, None)


def is_pinned(tensor: torch.Tensor) -> bool:
    try:
        return bool(getattr(tensor.untyped_storage(), PINNED_ATTR, False))
    except (RuntimeError, NotImplementedError):
        return False


def mark(tensor: torch.Tensor, index: int | None) -> None:
    """Put ``tensor``'s storage on device ``index`` (None: the host), with memory stats."""
    try:
        storage = tensor.untyped_storage()
    except (RuntimeError, NotImplementedError):
        return
    old = getattr(storage, DEVICE_ATTR, None)
    if old == index:
        return
    nbytes = storage.nbytes()
    devices = gpu().devices
    if old is not None:
        devices[old].allocated -= nbytes
    if index is None:
        delattr(storage, DEVICE_ATTR)
        return
    setattr(storage, DEVICE_ATTR, index)
    device = devices[index]
    device.allocated += nbytes
    device.peak = max(device.peak, device.allocated)
    weakref.finalize(storage, _freed, storage_id=id(storage), device=device, nbytes=nbytes)


def _freed(*, storage_id: int, device: Any, nbytes: int) -> None:
    device.allocated -= nbytes


def mark_all(tree: Any, index: int | None) -> None:
    for leaf in tree_flatten(tree)[0]:
        if isinstance(leaf, torch.Tensor):
            mark(leaf, index)


def _cuda_index(device: Any) -> int | None:
    """The CUDA device index ``device`` names (current device for plain "cuda"), else None."""
    if isinstance(device, int) and not isinstance(device, bool):  # an index names a GPU
        device = torch.device("cuda", device)
    if isinstance(device, str):
        if not device.startswith("cuda"):
            return None
        device = torch.device(device)
    if isinstance(device, torch.device) and device.type == "cuda":
        index = gpu().current_device() if device.index is None else device.index
        gpu().check_index(index)
        return index
    return None


def copy_duration_ns(tensor: torch.Tensor) -> int:
    nbytes = tensor.numel() * tensor.element_size()
    return round(nbytes / gpu().config.copy_bytes_per_s * 1e9)


def host_to_device(src: torch.Tensor, out: torch.Tensor, index: int, *, non_blocking: bool) -> None:
    """Mark ``out`` and enqueue the copy; the host waits unless it may run ahead."""
    mark(out, index)
    sim = gpu()
    kernel = sim.launch(sim.current_stream(index), copy_duration_ns(src), "memcpy HtoD")
    if kernel is not None and not (non_blocking and is_pinned(src)):
        sim.host_wait("h2d_copy", kernel.end_ns, debug_visible=True)


def device_to_host(src: torch.Tensor, *, kind: str, non_blocking: bool = False) -> None:
    """A device→host read of ``src``: enqueue the copy and, unless async, wait for it."""
    sim = gpu()
    index = device_of(src)
    assert index is not None
    stream = sim.current_stream(index)
    kernel = sim.launch(stream, copy_duration_ns(src), "memcpy DtoH")
    if not non_blocking:
        until = kernel.end_ns if kernel is not None else stream.busy_until_ns
        sim.host_wait(kind, until, debug_visible=True)


class DevicePlacement(TorchFunctionMode):
    """See the module docstring."""

    #: Tensor methods that read a device value back (each one a host wait).
    READS: ClassVar[dict[Any, str]] = {
        torch.Tensor.item: "item",
        torch.Tensor.tolist: "tolist",
        torch.Tensor.__bool__: "bool",
        torch.Tensor.__float__: "float",
        torch.Tensor.__int__: "int",
        torch.Tensor.__index__: "index",
    }

    def __torch_function__(
        self,
        func: Any,
        types: Any,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        kwargs = kwargs or {}
        if _accessor(func, "device", "__get__"):
            index = device_of(args[0])
            return func(*args) if index is None else torch.device("cuda", index)
        if _accessor(func, "is_cuda", "__get__"):
            return device_of(args[0]) is not None
        if _accessor(func, "is_cpu", "__get__"):
            return device_of(args[0]) is None
        if func is torch.Tensor.get_device:
            index = device_of(args[0])
            return func(*args) if index is None else index
        if _accessor(func, "data", "__set__"):
            func(*args)
            mark(args[0], device_of(args[1]))
            return None
        if func is torch.Tensor.to:
            return self._to(args[0], args[1:], kwargs)
        if func is torch.Tensor.cuda:
            target = args[1] if len(args) > 1 else kwargs.get("device")
            index = (
                gpu().current_device()
                if target is None
                else _cuda_index(
                    torch.device("cuda", target) if isinstance(target, int) else target
                )
            )
            return self._to(
                args[0],
                (),
                {
                    "device": torch.device("cuda", index),
                    "non_blocking": kwargs.get("non_blocking", False),
                },
            )
        if func is torch.Tensor.cpu:
            return self._to(args[0], ("cpu",), {})
        if func is torch.Tensor.numpy and device_of(args[0]) is not None:
            raise TypeError(
                f"can't convert cuda:{device_of(args[0])} device type tensor to "
                "numpy. Use Tensor.cpu() to copy the tensor to host memory first."
            )
        kind = self.READS.get(func)
        if kind is not None and device_of(args[0]) is not None:
            device_to_host(args[0], kind=kind)
            return _reading(func, args, kwargs)
        if kwargs.get("pin_memory"):  # a factory allocating page-locked host memory
            out = func(*args, **{**kwargs, "pin_memory": False})
            setattr(out.untyped_storage(), PINNED_ATTR, True)
            return out
        index = _cuda_index(kwargs.get("device"))
        if index is None:
            return func(*args, **kwargs)
        out = func(*args, **{**kwargs, "device": "cpu"})
        if func in (torch.tensor, torch.as_tensor):  # host data copied to the device
            host_to_device(out, out, index, non_blocking=False)
        else:
            mark_all(out, index)
            sim = gpu()
            sim.launch(
                sim.current_stream(index),
                sim.config.min_kernel_ns,
                getattr(func, "__name__", "factory"),
            )
        return out

    def _to(self, tensor: torch.Tensor, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """``Tensor.to`` with a CUDA target or from a device tensor (copy semantics of torch)."""
        source = device_of(tensor)
        if args and isinstance(args[0], torch.Tensor):  # .to(other): other's device and dtype
            other = args[0]
            target_index = device_of(other)
            device: Any = (
                torch.device("cuda", target_index) if target_index is not None else other.device
            )
            args = (device, other.dtype, *args[1:])
        parsed = torch._C._nn._parse_to(*args, **{k: v for k, v in kwargs.items() if k != "copy"})
        device, dtype, non_blocking = parsed[0], parsed[1], parsed[2]
        target = _cuda_index(device) if device is not None else source
        copy = bool(kwargs.get("copy", False))
        memory_format = parsed[3] if len(parsed) > 3 and parsed[3] is not None else None
        if (
            target == source
            and not copy
            and dtype in (None, tensor.dtype)
            and memory_format in (None, torch.preserve_format)
        ):
            return tensor  # nothing to do: torch returns the tensor itself
        if target is None and source is None:
            return torch.Tensor.to(tensor, *args, **kwargs)
        cpu_kwargs: dict[str, Any] = {
            "device": "cpu",
            "dtype": dtype or tensor.dtype,
            "copy": True,
            "memory_format": memory_format or torch.preserve_format,
        }
        if target is not None and source is None:  # host → device
            out = torch.Tensor.to(tensor, **cpu_kwargs)
            host_to_device(tensor, out, target, non_blocking=non_blocking)
            return out
        if target is None:  # device → host
            device_to_host(tensor, kind="d2h_copy", non_blocking=non_blocking)
            _local.host_result = True
            try:
                out = torch.Tensor.to(tensor, **cpu_kwargs)
            finally:
                _local.host_result = False
            mark(out, None)
            return out
        if target != source:  # device → device: a copy on the source's stream
            device_to_host(tensor, kind="d2d_copy", non_blocking=True)
            out = torch.Tensor.to(tensor, **cpu_kwargs)
            mark(out, target)
            return out
        return torch.Tensor.to(tensor, **cpu_kwargs)  # same device, new dtype: a kernel


def _accessor(func: Any, prop: str, method: str) -> bool:
    """Whether ``func`` is ``Tensor.<prop>.<method>`` (a fresh method-wrapper at each access)."""
    return getattr(func, "__name__", None) == method and getattr(func, "__self__", None) is getattr(
        torch.Tensor, prop
    )


def _reading(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """Run a host read whose wait is already counted (the ops below must not count it again)."""
    _local.reading = True
    try:
        return func(*args, **kwargs)
    finally:
        _local.reading = False


class DeviceKernels(TorchDispatchMode):
    """See the module docstring."""

    def __torch_dispatch__(
        self,
        func: Any,
        types: Any,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        kwargs = kwargs or {}
        tensors = [t for t in tree_flatten((args, kwargs))[0] if isinstance(t, torch.Tensor)]
        devices = {device_of(t) for t in tensors}
        devices.discard(None)
        if not devices:
            return func(*args, **kwargs)
        sim = gpu()
        if sim.config.strict_devices and func not in COPY_OPS:
            _check_devices(func, tensors, devices)
        index = min(devices)
        if func in SYNC_OPS and not getattr(_local, "reading", False):
            device_to_host(next(t for t in tensors if device_of(t) is not None), kind=str(func))
        start = time.perf_counter_ns()
        out = func(*args, **kwargs)
        took = time.perf_counter_ns() - start
        if not (func.is_view or func in FREE_OPS or func in SYNC_OPS):
            sim.launch(
                sim.current_stream(index),
                max(sim.config.min_kernel_ns, round(took * sim.config.kernel_factor)),
                str(func),
                enqueue_ns=start,
            )
        if not getattr(_local, "host_result", False) and func not in SYNC_OPS:
            tree_map_only(torch.Tensor, lambda t: mark(t, index), out)
        return out


def _check_devices(func: Any, tensors: list[torch.Tensor], devices: set[int | None]) -> None:
    """torch's "Expected all tensors to be on the same device" (a CPU scalar is allowed)."""
    names = sorted(f"cuda:{d}" for d in devices if d is not None)
    if len(names) == 1 and any(device_of(t) is None and t.dim() > 0 for t in tensors):
        names.append("cpu")
    if len(names) > 1:
        raise RuntimeError(
            f"Expected all tensors to be on the same device, but found at least "
            f"two devices, {names[0]} and {names[1]}! ({func})"
        )


def group_tensors_by_device_and_dtype(original: Any) -> Any:
    """Wrap ``torch._C._group_tensors_by_device_and_dtype`` (optimizers and the GradScaler group
    their tensors with it): its keys carry the tensors' real device, the CPU, which the
    optimizer would then copy its scaler tensors to; device tensors get their CUDA device."""

    def grouped(tensorlistlist: Any, with_indices: bool = False) -> Any:
        groups = original(tensorlistlist, with_indices)
        out = {}
        for (device, dtype), value in groups.items():
            first = next((t for t in value[0][0] if t is not None), None)
            index = device_of(first)
            out[(device if index is None else torch.device("cuda", index), dtype)] = value
        return out

    return grouped


def pin_memory(self: torch.Tensor, device: Any = None) -> torch.Tensor:
    """``Tensor.pin_memory``: a copy in (simulated) page-locked host memory."""
    if device_of(self) is not None:
        raise RuntimeError(
            f"cannot pin 'torch.cuda.FloatTensor' only dense CPU tensors can be "
            f"pinned (device cuda:{device_of(self)})"
        )
    out = self.clone()
    setattr(out.untyped_storage(), PINNED_ATTR, True)
    return out


def tensor_is_pinned(self: torch.Tensor, device: Any = None) -> bool:
    return is_pinned(self)
