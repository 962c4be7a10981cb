"""What a candidate training interpreter has, printed as one JSON line.

``gpuwatch.core.run.interpreters`` runs this file's *source* with ``<python> -c`` in every
candidate Python it finds, so it must run anywhere: stdlib only, nothing of gpuwatch, and
syntax that even Python 2.7 parses (no annotations, no f-strings), so that an old Python
gets the verdict "too old" instead of a SyntaxError nobody can read. Every failed import
becomes a null field plus its error text; the script always exits 0.
"""

import json
import platform
import sys


def _import(name):
    """Import ``name``; any failure (ImportError, a broken DLL's OSError, ...) becomes text."""
    saved = sys.stdout
    sys.stdout = sys.stderr  # some packages print on import: stdout carries the JSON only
    try:
        return __import__(name), None
    except Exception as exc:  # the survey reports whatever broke
        return None, type(exc).__name__ + ": " + str(exc)
    finally:
        sys.stdout = saved


def collect():
    """What this interpreter has: Python, torch, torchvision, CUDA and the GPUs' capabilities; a
    failed import is a null field plus its error text."""
    info = {
        "python": platform.python_version(),
        "executable": sys.executable,
        "prefix": sys.prefix,
        "torch": None,
        "torch_error": None,
        "torchvision": None,
        "torchvision_error": None,
        "cuda": None,
        "cuda_available": None,
        "cuda_error": None,
        "arch_list": [],
        "capabilities": [],
    }
    torch, info["torch_error"] = _import("torch")
    if torch is None:
        return info
    info["torch"] = str(torch.__version__)
    torchvision, info["torchvision_error"] = _import("torchvision")
    if torchvision is not None:
        info["torchvision"] = str(torchvision.__version__)
    info["cuda"] = torch.version.cuda
    try:
        info["arch_list"] = list(torch.cuda.get_arch_list())
        info["cuda_available"] = bool(torch.cuda.is_available())
        if info["cuda_available"]:
            info["capabilities"] = [
                list(torch.cuda.get_device_capability(i)) for i in range(torch.cuda.device_count())
            ]
    except Exception as exc:  # a broken driver must not break the survey
        info["cuda_error"] = type(exc).__name__ + ": " + str(exc)
    return info


if __name__ == "__main__":
    sys.stdout.write(json.dumps(collect(), default=str) + "\n")
    sys.stdout.flush()
