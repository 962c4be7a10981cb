"""The data a run is made of: ring-buffer stores, typed messages, metric names, liveness."""
