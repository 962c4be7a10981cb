"""Pure analysis of a run's data: no threads, processes or files; the same in bench and window."""
