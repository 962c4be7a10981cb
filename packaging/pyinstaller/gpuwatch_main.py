"""Entry point of the frozen app: the ``gpuwatch`` command (``freeze_support`` runs first,
inside ``gpuwatch.cli.main``)."""

import sys

from gpuwatch.cli import main

if __name__ == "__main__":
    sys.exit(main())
