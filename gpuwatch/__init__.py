"""gpuwatch: see why a PyTorch training loop is slow while it runs.

Kept import-free on purpose: ``gpuwatch --version`` must not pull in torch or Qt.
"""

__version__ = "0.1.0"
