"""The runner: the training process the gpuwatch GUI starts and watches.

It imports only the standard library, torch (PIL, which comes with torchvision, for the vision
demo; torchvision itself only in ``--survey``) and ``gpuwatch.protocol`` (checked by
import-linter), so it also runs from a plain source copy on ``PYTHONPATH`` in any interpreter
that has torch. This package module imports nothing: ``--help`` must stay instant.
"""
