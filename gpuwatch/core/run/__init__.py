"""A live run: the runner process and its link, the coarse samplers, NVML, clocks, the tour."""
