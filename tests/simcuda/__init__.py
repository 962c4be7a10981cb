"""simcuda: a pure-Python simulated CUDA device behind ``torch.cuda``, for tests only.

It lets the test suite execute gpuwatch's CUDA path (event timing, the runner's CUDA branches,
a real runner process on ``--device cuda``) on a machine without a GPU, and gives tests the
ground truth a GPU never does (every kernel's and event marker's time, every host wait).
This is a model, never a GPU measurement: see docs/design.md, "Executing the CUDA path
without a GPU", for what it models and what it cannot show.

* ``model``: devices, clocks (drift), in-order streams, markers, host waits, capture.
* ``cuda_api``: the ``torch.cuda`` classes and functions over the model.
* ``placement``: "cuda" tensors (CPU tensors marked as device tensors) and their kernels.
* ``install``: ``install(SimConfig(...))`` / ``uninstall()``.
* ``runner_boot``: start a real runner process on the simulation (``boot/sitecustomize.py``).
"""

from simcuda.install import install, uninstall
from simcuda.model import SimConfig, SimGpu

__all__ = ["SimConfig", "SimGpu", "install", "uninstall"]
