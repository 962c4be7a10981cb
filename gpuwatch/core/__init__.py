"""The GUI's engine, without Qt or torch, in four layers (each imports only those below it).

- ``model``: the data a run is made of (stores, typed messages, metric names, liveness).
- ``figures``: pure analysis of that data (steps, gaps and their causes, busy shares, advice).
- ``run``: a live run (the runner process, its link, the samplers, NVML, clocks, the tour).
- ``files``: recordings, replays and exports.

The headless commands built on them live in ``gpuwatch.commands``.
"""
