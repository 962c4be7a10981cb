"""The runner's link as the script's instruments use it, keeping every message it is given."""

from __future__ import annotations

import queue
import threading
from typing import Any


class FakeLink:
    """Sends, batches and logs are kept in ``messages``; no control ever arrives."""

    def __init__(self) -> None:
        self.messages: list[tuple[str, dict[str, Any]]] = []
        self.controls: queue.Queue[dict[str, Any]] = queue.Queue()
        self.lost = threading.Event()

    def send(self, kind: str, **fields: Any) -> None:
        self.messages.append((kind, fields))

    def send_batch(self, kind: str, **fields: Any) -> None:
        self.messages.append((kind, fields))

    def log(self, level: str, text: str) -> None:
        self.send("log", level=level, text=text)

    def kinds(self, kind: str) -> list[dict[str, Any]]:
        return [fields for sent, fields in self.messages if sent == kind]
