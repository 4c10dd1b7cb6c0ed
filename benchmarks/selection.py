"""Selection decision time: one cohort choice per round over 10^4, 10^5 and 10^6 clients.

Each selector (:mod:`fedclock.scheduling.selection`) gets a view of a population whose
history is filled as after many rounds: every client picked a few times, 90 % of them with
an observed duration (log-normal) and a reported loss and sample count, so Oort and TiFL
score, exploit and explore, and power-of-choice has candidates with and without losses; FedCS
reads a disclosed resource request (log-normal times, a 50 s deadline). Each round, the
candidates are all clients but ``2 K`` drawn at random (still busy: stragglers, or tasks in
flight), so no round sees the same candidates as the one before, and after the choice the
picked clients report a new duration, loss and sample count (the history is updated
incrementally, as the clock does). Per selector and population size the script prints the
median and the largest, over ``--rounds`` consecutive rounds, of the wall time of one
``select`` call (the round index advances, so per-round work such as Oort's pacer and
TiFL's re-tiering every 10 rounds is included), and the time the clock takes to list the
candidates as an array (:meth:`~fedclock.scheduling.clock.Clock.candidates`).
``uniform`` is the clock's own draw, ``rng.choice(n, K, replace=False)``. A selector that
takes its candidates lazily (:attr:`~fedclock.scheduling.selection.Selector.lazy_candidates`:
Oort) gets them as the clock gives them, a
:class:`~fedclock.scheduling.candidate_set.Candidates` over the idle finder of an
always-available population with those ``2 K`` busy, and its time excludes the listing.

    python benchmarks/selection.py [--sizes 10000 100000 1000000] [--cohort 100] [--rounds 10]
                                   [--clock wall|cpu] [--out FILE]

``--out`` also writes the table (with the machine's processor count and load average) to a
Markdown file. ``--clock cpu`` times the deciding thread's CPU time instead of the wall
clock: on a machine shared with other work, a single-threaded decision's CPU time is what its
wall time would be on an idle core (apart from memory bandwidth the others take). The NumPy
operations used here run on one thread whatever the machine.
"""
from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path
from typing import Callable

import numpy as np

from fedclock.scheduling.candidate_set import Candidates
from fedclock.scheduling.candidates import EveryIdleClient
from fedclock.scheduling.idle import BusyClients
from fedclock.scheduling.selection import ClientHistory, Disclosed, SelectionView
from fedclock.scheduling.selection_registry import SELECTORS


def history(n: int, seed: int = 0) -> ClientHistory:
    """A population's observed history after many rounds (see the module)."""
    rng = np.random.default_rng(seed)
    h = ClientHistory(n)
    known = rng.random(n) < 0.9
    h.times_picked[:] = rng.integers(1, 6, n)
    h.last_picked_round[:] = rng.integers(0, 500, n)
    h.last_picked_time[:] = h.last_picked_round * 10.0
    h.last_duration[known] = rng.lognormal(1.0, 1.0, int(known.sum()))
    h.duration_sum[known] = h.last_duration[known] * 2
    h.arrivals[known] = 2
    h.last_loss[known] = rng.lognormal(0.0, 0.5, int(known.sum()))
    h.last_samples[known] = rng.integers(20, 500, int(known.sum()))
    h.applied[known] = 1
    h.relist()  # the arrays were written directly: list the clients with an applied result
    return h


def disclosed(n: int, seed: int = 1) -> Disclosed:
    rng = np.random.default_rng(seed)
    down = rng.lognormal(0.5, 1.0, n)
    up = rng.lognormal(-0.5, 0.5, n)
    return Disclosed(rng.integers(20, 500, n), None, None, None, None, down + up, down, up)


def time_selector(name: str, n: int, cohort: int, rounds: int,
                  clock: Callable[[], float] = time.perf_counter) -> tuple[float, float]:
    """Median and largest seconds (by ``clock``) of one ``select`` call of ``name`` over
    ``rounds`` rounds."""
    h = history(n)
    request = disclosed(n)
    sizes = request.data_size
    rng = np.random.default_rng(2)
    times = []
    selector = None
    if name != "uniform":
        cls = SELECTORS[name]
        selector = cls(cls.Params(), np.random.default_rng(0))
    for r in range(rounds):
        busy = rng.choice(n, size=2 * cohort, replace=False)
        mask = np.ones(n, dtype=bool)
        mask[busy] = False
        candidates = np.flatnonzero(mask)
        finder = EveryIdleClient(BusyClients(), n)  # what the clock hands a selector that takes them lazily
        for c in busy.tolist():
            finder.busy[c] = None
        lazy = Candidates(finder, finder.count(0.0, 0), n)
        view = SelectionView(h, r * 10.0, 500 + r, 500 + r, lambda: request, data_size=sizes, deadline_s=50.0)
        start = clock()
        if selector is None:
            chosen = np.sort(candidates[rng.choice(candidates.shape[0], size=cohort, replace=False)])
        else:
            chosen = selector.select(view, lazy if selector.lazy_candidates else candidates, cohort)
        times.append(clock() - start)
        for c in np.asarray(chosen).tolist():  # the cohort reports back
            h.picked(c, r * 10.0, 500 + r)
            h.arrived(c, float(rng.lognormal(1.0, 1.0)), float(rng.lognormal(0.0, 0.5)), int(rng.integers(20, 500)))
    return statistics.median(times), max(times)


def time_candidates(n: int, rounds: int) -> float:
    """Median seconds to list ``n`` idle clients as an array (the clock's way, none busy)."""
    busy: dict[int, object] = {}
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        mask = np.ones(n, dtype=bool)
        if busy:
            mask[np.fromiter(busy.keys(), dtype=np.int64, count=len(busy))] = False
        np.flatnonzero(mask)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main(argv: list[str] | None = None, out: Callable[[str], None] = print) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000, 1_000_000])
    parser.add_argument("--cohort", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--out", type=Path, default=None, help="also write the table to this Markdown file")
    parser.add_argument("--clock", choices=["wall", "cpu"], default="wall",
                        help="cpu: the deciding thread's CPU time (time.thread_time), for a loaded machine")
    args = parser.parse_args(argv)
    clock = time.thread_time if args.clock == "cpu" else time.perf_counter
    names = ["uniform", *SELECTORS]
    lines = [f"ms per decision ({args.clock} time), median / largest of {args.rounds} rounds (cohort {args.cohort}); "
             f"{os.cpu_count()} processors, load average {os.getloadavg()[0]:.2f} at the start",
             "| clients | " + " | ".join(names) + " | candidates array |",
             "|---" * (len(names) + 2) + "|"]
    for line in lines:
        out(line)
    for n in args.sizes:
        cells = []
        for name in names:
            median, largest = time_selector(name, n, args.cohort, args.rounds, clock)
            cells.append(f"{median * 1e3:.2f} / {largest * 1e3:.2f}")
        lines.append(f"| {n:,} | " + " | ".join(cells) + f" | {time_candidates(n, args.rounds) * 1e3:.2f} |")
        out(lines[-1])
    if args.out is not None:
        args.out.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
