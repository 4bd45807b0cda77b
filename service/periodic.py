"""A background thread that does one thing every so often, for the service's loops."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

log = logging.getLogger(__name__)

THREAD_PREFIX = "periodic: "  # each worker's thread is named this and what it does


class Periodic:
    """Calls `tick` every `interval_s` on a daemon thread (first at once if `at_once`)
    until stopped. A failing tick is logged and the next one runs as usual: the
    database may be restarting."""

    def __init__(
        self, name: str, interval_s: float, tick: Callable[[], None], at_once: bool = False
    ) -> None:
        self._name = name
        self._interval_s = interval_s
        self._tick = tick
        self._at_once = at_once
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=THREAD_PREFIX + name, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def _run(self) -> None:
        if self._at_once:
            self._tick_logged()
        while not self._stop.wait(self._interval_s):
            self._tick_logged()

    def _tick_logged(self) -> None:
        try:
            self._tick()
        except Exception:
            log.exception("%s failed", self._name)
