"""The sidecar's state: the readings of the last windows and the observation they give.

The shell around the pure core: read the source, keep the snapshots, recompute the
observation. A failing source never raises out of :meth:`Sidecar.poll`; it is logged
once per cause (the part of the error message before the first ``": "``) and once
more when it recovers, and the estimates go stale, then unknown, on their own.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from specops.errors import MetricsError
from specops.observation import (
    History,
    Observation,
    ObserverConfig,
    SourceObservation,
    observe,
    snapshot_from_reading,
)
from specops_sidecar._exposition import SourceCounts
from specops_sidecar._sources import MetricsSource

__all__ = [
    "OncePerCause",
    "Sidecar",
]

log = logging.getLogger("specops.sidecar")


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


class Sidecar:
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
    def observation(self) -> Observation:
        """The observation as of the last poll."""
        return self._observation

    def observation_at(self, now: float) -> Observation:
        """The observation as of ``now``: recomputed if the last poll is over a second old,
        so a stuck poll cannot keep estimates looking fresh."""
        if now - self._observation.observed_at > 1.0:
            self._observation = self._observe(now)
        return self._observation

    @property
    def counts(self) -> SourceCounts:
        return SourceCounts(self._ok, self._failed, self._last_read_s)

    def _observe(self, now: float) -> Observation:
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
