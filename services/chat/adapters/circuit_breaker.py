"""A consecutive-failure circuit breaker: closed -> open (fail fast) -> half-open (one trial) -> closed."""
from __future__ import annotations

import logging
import time
from collections.abc import Callable

from services.chat import metrics

log = logging.getLogger(__name__)

CLOSED, OPEN, HALF_OPEN = "closed", "open", "half_open"


class CircuitBreaker:
    def __init__(
        self, *, name: str, failure_threshold: int, cooldown_s: float, clock: Callable[[], float] = time.monotonic
    ) -> None:
        if failure_threshold < 1 or cooldown_s <= 0:
            raise ValueError("failure_threshold must be >= 1 and cooldown_s positive")
        self.name = name
        self.state = CLOSED
        metrics.breaker_state(name, CLOSED)
        self._threshold = failure_threshold
        self._cooldown = cooldown_s
        self._clock = clock
        self._failures = 0
        self._opened_at = 0.0
        self._trial_in_flight = False

    def allow(self) -> bool:
        """Whether a call may go out now; in half-open only one trial call at a time."""
        if self.state == OPEN and self._clock() - self._opened_at >= self._cooldown:
            self._set(HALF_OPEN)
        if self.state == CLOSED:
            return True
        if self.state == HALF_OPEN and not self._trial_in_flight:
            self._trial_in_flight = True
            return True
        return False

    def seconds_until_trial(self) -> float:
        """While open, the time left until a call may go out as the trial; 0 otherwise."""
        if self.state != OPEN:
            return 0.0
        return max(self._cooldown - (self._clock() - self._opened_at), 0.0)

    def record_success(self) -> None:
        self._failures = 0
        self._trial_in_flight = False
        self._set(CLOSED)

    def abandon(self) -> None:
        """The call ended without a verdict (cancelled): let the next call be the trial."""
        self._trial_in_flight = False

    def record_failure(self) -> None:
        self._trial_in_flight = False
        self._failures += 1
        if self.state == HALF_OPEN or self._failures >= self._threshold:
            self._opened_at = self._clock()
            self._set(OPEN)

    def _set(self, state: str) -> None:
        if state != self.state:
            log.warning("circuit breaker changed state", extra={"breaker": self.name, "from": self.state, "to": state})
            self.state = state
            metrics.breaker_state(self.name, state)
