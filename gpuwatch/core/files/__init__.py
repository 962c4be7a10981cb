"""Runs on disk: recordings, their reader and replay, and the exports (CSV, Perfetto)."""
