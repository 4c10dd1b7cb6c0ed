"""When clients can accept work.

Availability gates dispatch: an unavailable client is never sampled into a cohort or given
an async slot. Models answer ``available(client, now, round_index)``, where ``round_index``
is the sync round (or, in async mode, the server version), and ``next_change(client, now)``,
the next virtual time the answer may change by itself (infinity for round-driven models).
The answer is constant from ``now`` until ``next_change(now)``. The time-driven models also
answer ``state(now)``, both at once, for the clock's index of available clients
(:mod:`fedclock.scheduling.available_index`). Each model's settings, and the building of
one client's model from them, are in :mod:`fedclock.scheduling.availability_config`.
"""
from __future__ import annotations

import bisect
import math
from typing import Iterator, Protocol

import numpy as np

from fedclock.scheduling.fedscale_traces import unrolled


class Availability(Protocol):
    """One client's availability."""

    def available(self, now: float, round_index: int) -> bool: ...

    def next_change(self, now: float) -> float: ...


class Always:
    """Always available."""

    def available(self, now: float, round_index: int) -> bool:
        return True

    def next_change(self, now: float) -> float:
        return math.inf


class Never:
    """Never available: a client whose device cannot fit the task (the clock's
    :attr:`~fedclock.scheduling.clock.Clock.feasible`)."""

    def available(self, now: float, round_index: int) -> bool:
        return False

    def next_change(self, now: float) -> float:
        return math.inf


class Periodic:
    """Available in one round, then missing ``period`` rounds (the SPFL/PLGA schedule):
    available in rounds r with (r + offset) mod (period + 1) == 0."""

    def __init__(self, period: int, offset: int = 0) -> None:
        self.period = period
        self.offset = offset

    def available(self, now: float, round_index: int) -> bool:
        return (round_index + self.offset) % (self.period + 1) == 0

    def next_change(self, now: float) -> float:
        return math.inf


class Markov:
    """Two-state on/off process: up periods ~ Exp(mean_up_s), down periods ~ Exp(mean_down_s).
    The switching times are drawn lazily from the client's own generator, so a query at any
    time is deterministic and costs O(log switches)."""

    def __init__(self, mean_up_s: float, mean_down_s: float, start: str, rng: np.random.Generator) -> None:
        self.mean_up_s = mean_up_s
        self.mean_down_s = mean_down_s
        self._rng = rng
        if start == "stationary":
            self._up_at_zero = bool(rng.random() < mean_up_s / (mean_up_s + mean_down_s))
        else:
            self._up_at_zero = start == "up"
        self._switches: list[float] = []
        self._extend(0.0)

    def _extend(self, until: float) -> None:
        t = self._switches[-1] if self._switches else 0.0
        while t <= until:
            up = self._up_at_zero ^ (len(self._switches) % 2 == 1)
            t += float(self._rng.exponential(self.mean_up_s if up else self.mean_down_s))
            self._switches.append(t)

    def available(self, now: float, round_index: int) -> bool:
        self._extend(now)
        flips = bisect.bisect_right(self._switches, now)
        return self._up_at_zero ^ (flips % 2 == 1)

    def next_change(self, now: float) -> float:
        self._extend(now)
        return self._switches[bisect.bisect_right(self._switches, now)]

    def state(self, now: float) -> tuple[bool, float]:
        """``(available(now, ...), next_change(now))`` in one step."""
        self._extend(now)
        flips = bisect.bisect_right(self._switches, now)
        return self._up_at_zero ^ (flips % 2 == 1), self._switches[flips]


class Diurnal:
    """Online during [phase + k * period, phase + k * period + on_fraction * period) for
    every integer k: a daily cycle shifted by the client's phase."""

    def __init__(self, period_s: float, on_fraction: float, phase_s: float) -> None:
        self.period_s = period_s
        self.on_s = on_fraction * period_s
        self.phase_s = phase_s % period_s

    def _cycle(self, now: float) -> tuple[float, float]:
        """(start, end) of the cycle holding ``now``: start <= now < end, exactly in floating
        point, with cycle k spanning [phase + k * period, phase + (k + 1) * period), so the
        cycles tile the time line (the next change is always later than ``now``, and the
        answer is constant until it)."""
        k = math.floor((now - self.phase_s) / self.period_s)
        while self.phase_s + k * self.period_s > now:
            k -= 1
        while self.phase_s + (k + 1) * self.period_s <= now:
            k += 1
        return self.phase_s + k * self.period_s, self.phase_s + (k + 1) * self.period_s

    def available(self, now: float, round_index: int) -> bool:
        return self.on_s >= self.period_s or now < self._cycle(now)[0] + self.on_s

    def next_change(self, now: float) -> float:
        if self.on_s >= self.period_s:
            return math.inf
        start, end = self._cycle(now)
        return start + self.on_s if now < start + self.on_s else end

    def state(self, now: float) -> tuple[bool, float]:
        """``(available(now, ...), next_change(now))`` in one step."""
        if self.on_s >= self.period_s:
            return True, math.inf
        start, end = self._cycle(now)
        return (True, start + self.on_s) if now < start + self.on_s else (False, end)


class TraceReplay:
    """Online exactly during the given [start, end) intervals (sorted, disjoint)."""

    def __init__(self, intervals: list[tuple[float, float]]) -> None:
        self.starts = [s for s, _ in intervals]
        self.ends = [e for _, e in intervals]

    def available(self, now: float, round_index: int) -> bool:
        i = bisect.bisect_right(self.starts, now) - 1
        return i >= 0 and now < self.ends[i]

    def next_change(self, now: float) -> float:
        i = bisect.bisect_right(self.starts, now) - 1
        if i >= 0 and now < self.ends[i]:
            return self.ends[i]
        return self.starts[i + 1] if i + 1 < len(self.starts) else math.inf

    def state(self, now: float) -> tuple[bool, float]:
        """``(available(now, ...), next_change(now))`` in one step."""
        i = bisect.bisect_right(self.starts, now) - 1
        if i >= 0 and now < self.ends[i]:
            return True, self.ends[i]
        return False, self.starts[i + 1] if i + 1 < len(self.starts) else math.inf


class RepeatingTrace:
    """Online during the given intervals of ``[0, period)``, repeated every ``period``
    seconds (FedScale's behaviour traces, :mod:`fedclock.scheduling.fedscale_traces`). An
    interval that ends a period and one that starts the next are one online stretch."""

    def __init__(self, intervals: list[tuple[float, float]], period: float) -> None:
        self.intervals = intervals
        self.period = period
        self._window: tuple[float, TraceReplay] | None = None

    def _replay(self, now: float) -> TraceReplay:
        """Exact intervals over the three periods from the one holding ``now`` (enough to find
        the next change, which lies within the next period unless always online)."""
        base = math.floor(now / self.period) * self.period
        if self._window is None or self._window[0] != base:
            spans = [(base + s, base + e) for s, e in unrolled(self.intervals, self.period, 3 * self.period)]
            self._window = (base, TraceReplay(spans))
        return self._window[1]

    def available(self, now: float, round_index: int) -> bool:
        return self.state(now)[0]

    def next_change(self, now: float) -> float:
        return self.state(now)[1]

    def state(self, now: float) -> tuple[bool, float]:
        """``(available(now, ...), next_change(now))`` in one step."""
        if not self.intervals:
            return False, math.inf
        if self.intervals == [(0.0, self.period)]:
            return True, math.inf
        return self._replay(now).state(now)


class DiurnalClients:
    """Every client on one daily cycle (:class:`Diurnal`), their phases held in one array: the
    population's model of ``availability: {type: diurnal, phases: population}``. It is a
    sequence of the clients' models (``clients[c]`` is client c's :class:`Diurnal`, made on
    demand, or :class:`Never` for a client :meth:`without` removed), so code that asks one
    client at a time keeps working; the clock's index reads the arrays instead
    (:mod:`fedclock.scheduling.diurnal_index`), which costs about 40 bytes a client instead of
    a Python object each."""

    def __init__(self, period_s: float, on_fraction: float, phases: np.ndarray,
                 never: np.ndarray | None = None) -> None:
        self.period_s = float(period_s)
        self.on_fraction = float(on_fraction)
        self.on_s = on_fraction * period_s
        self.phases = np.mod(np.asarray(phases, dtype=np.float64), self.period_s)
        """Each client's phase in [0, period_s) (as :class:`Diurnal` keeps it)."""
        self.never = never
        """Clients never available (infeasible ones), or None."""

    def __len__(self) -> int:
        return len(self.phases)

    def __getitem__(self, client: int) -> Availability:
        if self.never is not None and self.never[client]:
            return Never()
        return Diurnal(self.period_s, self.on_fraction, float(self.phases[client]))

    def __iter__(self) -> Iterator[Availability]:
        return (self[c] for c in range(len(self)))

    def without(self, infeasible: np.ndarray) -> "DiurnalClients":
        """The same clients with those marked in ``infeasible`` never available."""
        never = infeasible if self.never is None else (self.never | infeasible)
        return DiurnalClients(self.period_s, self.on_fraction, self.phases, never)

    def state(self, clients: np.ndarray, now: float) -> tuple[np.ndarray, np.ndarray]:
        """``(available, next change)`` of these clients at ``now``, as :meth:`Diurnal.state`
        computes them one by one (the same floating-point operations, so the same answers)."""
        phase = self.phases[clients]
        if self.on_s >= self.period_s:
            return np.ones(len(phase), dtype=bool), np.full(len(phase), math.inf)
        k = np.floor((now - phase) / self.period_s)
        for _ in range(2):
            k = np.where(phase + k * self.period_s > now, k - 1, k)
            k = np.where(phase + (k + 1) * self.period_s <= now, k + 1, k)
        start = phase + k * self.period_s
        on = now < start + self.on_s
        nxt = np.where(on, start + self.on_s, phase + (k + 1) * self.period_s)
        if self.never is not None:
            never = self.never[clients]
            on &= ~never
            nxt = np.where(never, math.inf, nxt)
        return on, nxt
