"""The windowed observer: poll one metrics source, keep the readings of the last windows, and
recompute the observation they give.

The shell around the pure core, shared by the sidecar (one pod's engine) and the operator
(a whole service's series in Prometheus): read the source, keep the snapshots in a
:class:`~specops.observation.History`, :func:`~specops.observation.observe` them. A failing
source never raises out of :meth:`WindowedObserver.poll`; it is logged once per cause (the
part of the error message before the first ``": "``) and once more when it recovers, and
the estimates go stale, then unknown, on their own.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from specops.errors import MetricsError
from specops.observation._history import History
from specops.observation._model import PodObservation, SourceObservation
from specops.observation._observe import ObserverConfig, observe
from specops.observation._snapshot import snapshot_from_reading
from specops.observation._sources import MetricsSource

__all__ = [
    "OncePerCause",
    "SourceCounts",
    "WindowedObserver",
]

log = logging.getLogger("specops.observation")


@dataclass(frozen=True)
class SourceCounts:
    """How the reads of a source went since the observer started."""

    reads_ok: int
    reads_failed: int
    last_read_seconds: float | None


class OncePerCause:
    """Logs a failure when its cause changes, and the recovery once."""

    def __init__(
        self, logger: logging.Logger, what: str = "metrics source", traceback: bool = False
    ) -> None:
        self._logger = logger
        self._what = what
        self._traceback = traceback
        self.current: str | None = None

    def failed(self, error: Exception) -> None:
        cause = f"{type(error).__name__}: {str(error).partition(': ')[0]}"
        if cause != self.current:
            self._logger.warning(
                "%s failing: %s", self._what, error, exc_info=error if self._traceback else None
            )
            self.current = cause

    def succeeded(self) -> None:
        if self.current is not None:
            self._logger.info("%s recovered (was: %s)", self._what, self.current)
            self.current = None


class WindowedObserver:
    """Polls one source and keeps the observation of the last ``max(windows)`` seconds."""

    def __init__(
        self,
        source: MetricsSource,
        config: ObserverConfig,
        clock: Callable[[], float] = time.time,
        logger: logging.Logger = log,
    ) -> None:
        self._source = source
        self._config = config
        self._clock = clock
        self._problems = OncePerCause(logger)
        self._history = History(max(config.windows_s))
        self._ok = 0
        self._failed = 0
        self._last_read_s: float | None = None
        self._last_success: float | None = None
        self._error = ""
        self._observation = self._observe(clock())

    @property
    def observation(self) -> PodObservation:
        """The observation as of the last poll."""
        return self._observation

    def observation_at(self, now: float) -> PodObservation:
        """The observation as of ``now``: recomputed if the last poll is over a second old,
        so a stuck poll cannot keep estimates looking fresh."""
        if now - self._observation.observed_at > 1.0:
            self._observation = self._observe(now)
        return self._observation

    @property
    def counts(self) -> SourceCounts:
        return SourceCounts(self._ok, self._failed, self._last_read_s)

    def _observe(self, now: float) -> PodObservation:
        source = SourceObservation(
            kind=self._source.kind,
            target=self._source.target,
            up=not self._error and self._ok > 0,
            last_success=self._last_success,
            error=self._error,
        )
        return observe(self._history.snapshots, now, self._config, source, self._history.intervals)

    async def poll(self) -> None:
        """Read once, keep what is new, recompute the observation."""
        started = time.perf_counter()
        try:
            readings = await self._source.read()
        except MetricsError as exc:
            self._failed += 1
            self._error = str(exc)
            self._problems.failed(exc)
        else:
            self._ok += 1
            self._error = ""
            self._last_success = self._clock()
            self._problems.succeeded()
            for reading in readings:
                self._history.add(snapshot_from_reading(reading))
        self._last_read_s = time.perf_counter() - started
        self._observation = self._observe(self._clock())
