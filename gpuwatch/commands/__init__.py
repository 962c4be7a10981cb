"""The headless commands (``bench``, ``run --headless``, ``doctor``, ``export``) on the core."""
