"""``python -m gpuwatch`` is the same as the ``gpuwatch`` command."""

from gpuwatch.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
