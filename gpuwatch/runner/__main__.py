"""Entry point of ``python -m gpuwatch.runner`` (guarded: spawned DataLoader workers re-import
the main module and must not start a second runner)."""

from gpuwatch.runner.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
