"""Who trains: the selection layer (``selection:`` in a scenario file).

The clock's cohorts (:class:`~fedclock.scheduling.cohorts.Cohorts`) ask a :class:`Selector`
which idle, available clients get work: a sync round's cohort
(:meth:`~fedclock.scheduling.cohorts.Cohorts.sample`), an asynchronous free slot
(:meth:`~fedclock.scheduling.cohorts.Cohorts.pick_idle`) and the clients sent the model at a
window close of windowed aggregation. ``uniform`` (the default) is the cohorts' own seeded draw
and changes no number of a run; it is not a :class:`Selector` object (the cohorts keep their
draw code, so a default run calls the same generator in the same order as before).

**What a selector sees.** Only what a real server could know (:class:`SelectionView`): for
each client its observed history (:class:`ClientHistory`: durations of its finished tasks,
when it was last picked and how often, the training loss and sample count its last applied
result reported, how many of its results were applied, how many of its tasks were lost,
timed out or cancelled), the current virtual time, round and server version, and a seeded
random stream of its own (stream ``SELECTION`` of :mod:`fedclock.scheduling.rng`). The
device profiles are the simulation's hidden truth: a view holds no reference to them. Only
when the scenario says the clients disclose them (``selection.disclose``),
:attr:`SelectionView.resources` gives them (:class:`Disclosed`, the resource request of
Nishio and Yonetani, ICC 2019, Sec. III-B); otherwise reading it raises :class:`NotDisclosed`.

**What changed, without a pass.** Beside the arrays, the history records the clients with an
applied result (:attr:`ClientHistory.explored`) and every arrival in order, with the client's
duration before it (:attr:`ClientHistory.arrival_clients`), so a selector can read what
changed since its last call instead of comparing whole arrays; and a selector that sets
:attr:`Selector.lazy_candidates` gets its candidates as a
:class:`~fedclock.scheduling.candidate_set.Candidates` (count, candidate of a rank,
membership) instead of an array listing them (Oort, :mod:`fedclock.scheduling.selection_oort`).

**Where the loss comes from.** A task's training metrics (``train_loss``, the mean loss of
its local steps, returned by the client with its upload; see :mod:`fedclock.actors.runtime`)
are known to the server when its result is applied. Results that are dropped as late, timed
out, lost or cancelled report no loss here (the server did not use them); their arrival time
(dropped) or failure (lost, timed out) is recorded.

**Checkpoints.** A resumed run replays the clock from ``t = 0`` (:mod:`fedclock.actors.replay`),
so a selector's own state (its generator, tiers, pacer) comes back by making the same
decisions again; what the replay cannot recompute is the losses the clients reported, so a
run whose selector reads them (:attr:`Selector.reads_loss`) logs every applied task's loss in
its checkpoints, and the replay hands them back to the history.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, ClassVar, Literal

import numpy as np
from pydantic import BaseModel, Field

from fedclock.scheduling.candidate_set import Candidates
from fedclock.scheduling.growing import Growing
from fedclock.scheduling.model_base import StrictModel

DISCLOSABLE = ("resources", "data_size")
"""What a scenario may let the clients disclose to the selector (``selection.disclose``)."""


class NotDisclosed(Exception):
    """A selector read something the scenario does not let the clients disclose."""


class NoParams(StrictModel):
    """A selector without settings."""


class SelectionConfig(BaseModel):
    """The ``selection:`` section: the selector's name (a built-in or ``module:attribute``),
    what the clients disclose, and the selector's own typed settings (validated by the
    loader against the selector's ``Params``; in the file they sit beside ``name``)."""

    model_config = {"frozen": True, "arbitrary_types_allowed": True}

    name: str = "uniform"
    disclose: tuple[Literal["resources", "data_size"], ...] = ()
    params: BaseModel = Field(default_factory=NoParams)

    @property
    def is_uniform(self) -> bool:
        """The clock's own uniform draw (no selector object)."""
        return self.name == "uniform"


@dataclass(frozen=True)
class Disclosed:
    """What clients tell the server in a resource request (FedCS, Nishio and Yonetani, ICC
    2019, Sec. III-B, step 2): per client, its data size, its compute speed and link, and
    the duration of a full task estimated from them and the task's declared bytes and work
    (the clock's own formula, :func:`fedclock.scheduling.devices.task_timing`). Arrays are
    read-only; fields the scenario does not disclose are None."""

    data_size: np.ndarray | None
    compute: np.ndarray | None
    down_mbps: np.ndarray | None
    up_mbps: np.ndarray | None
    latency_s: np.ndarray | None
    expected_duration_s: np.ndarray | None
    download_s: np.ndarray | None
    upload_s: np.ndarray | None


def _frozen(a: np.ndarray) -> np.ndarray:
    view = a.view()
    view.flags.writeable = False
    return view


def _written_zeros(n: int, dtype: type = np.float64) -> np.ndarray:
    """Zeros written at once: ``np.zeros`` maps untouched pages, and at millions of clients the
    first write to each page (a pick or arrival of a client never seen, every round) faulted
    one in: about 0.2 ms a call at 3 million clients against 3 µs once written
    (``benchmarks/RESULTS.md``, "Ten million clients")."""
    out: np.ndarray = np.empty(n, dtype=dtype)
    out.fill(0)
    return out


class ClientHistory:
    """What the server observed of each client, as arrays over client ids (written by the
    clock, read by selectors through a :class:`SelectionView`), and two records that grow
    with what happens instead of with the population, so a selector can read only what
    changed: the clients with an applied result (:attr:`explored`) and the arrivals in
    order (:attr:`arrival_clients`, :attr:`arrival_previous`)."""

    COUNT = np.int32
    """The counts' and rounds' type: 4 bytes a client each instead of 8 (eight of them: 320 MB at
    ten million clients; ``benchmarks/RESULTS.md``, "Ten million clients, second pass")."""

    def __init__(self, num_clients: int) -> None:
        n = num_clients
        zeros = _written_zeros
        count = self.COUNT
        self.num_clients = n
        self.last_duration = np.full(n, np.nan)
        """Seconds from dispatch to arrival of the client's last task whose result arrived (NaN: none yet)."""
        self.duration_sum = zeros(n)
        """Sum of those durations over every arrived task (with :attr:`arrivals`, their mean)."""
        self.arrivals = zeros(n, dtype=count)
        """Tasks whose results arrived (applied or dropped as late)."""
        self.last_picked_time = np.full(n, np.nan)
        self.last_picked_round = np.full(n, -1, dtype=count)
        """Round (sync) or server version (async) of the client's last dispatch; -1: never picked."""
        self.times_picked = zeros(n, dtype=count)
        self.last_loss = np.full(n, np.nan)
        """``train_loss`` of the client's last applied result (NaN: none yet)."""
        self.last_samples = zeros(n, dtype=count)
        """Sample count of the client's last applied result (0: none yet)."""
        self.applied = zeros(n, dtype=count)
        """Tasks whose results the server applied (the ones that reported a loss)."""
        self.lost = zeros(n, dtype=count)
        self.timed_out = zeros(n, dtype=count)
        self.cancelled = zeros(n, dtype=count)
        self.explored = Growing(np.int64)
        """Clients in the order of their first applied result (each once): every client with
        ``applied > 0``, and only those."""
        self.arrival_clients = Growing(np.int64)
        """The client of every arrival (:meth:`arrived`), in order."""
        self.arrival_previous = Growing(np.float64)
        """Beside each: the client's :attr:`last_duration` before that arrival (NaN: none), so a
        reader that kept the durations as of some arrival can bring them up to date from the
        arrivals after it alone. The two records cost 16 B an arrival (not a client): 16 MB
        after 10^4 rounds of 100 results."""

    def relist(self) -> None:
        """Rebuild :attr:`explored` (from :attr:`applied`, in id order) and the arrival record
        (one arrival of each client with a known :attr:`last_duration`, in id order, from
        none before) for a history whose arrays were written directly rather than through
        :meth:`arrived` (benchmarks, tests): one pass over the population. Call it before any
        selector reads the history; selectors read the records, not the arrays, to learn
        what changed."""
        self.explored = Growing(np.int64)
        self.explored.extend(np.flatnonzero(self.applied > 0))
        known = np.flatnonzero(~np.isnan(self.last_duration))
        self.arrival_clients = Growing(np.int64)
        self.arrival_clients.extend(known)
        self.arrival_previous = Growing(np.float64)
        self.arrival_previous.extend(np.full(known.shape[0], np.nan))

    def picked(self, client: int, now: float, round_index: int) -> None:
        self.times_picked[client] += 1
        self.last_picked_time[client] = now
        self.last_picked_round[client] = round_index

    def arrived(self, client: int, duration: float, loss: float | None, samples: int | None) -> None:
        """A result reached the server after ``duration`` seconds; ``loss`` and ``samples``
        when it was applied (None: not used; an applied result gives its ``samples``)."""
        self.arrival_clients.append(client)
        self.arrival_previous.append(self.last_duration[client])
        self.last_duration[client] = duration
        self.duration_sum[client] += duration
        self.arrivals[client] += 1
        if loss is not None:
            self.last_loss[client] = loss
        if samples is not None:
            self.last_samples[client] = samples
            if self.applied[client] == 0:
                self.explored.append(client)
            self.applied[client] += 1


class SelectionView:
    """A selector's read-only window on the run: :class:`ClientHistory` arrays (not
    writable), ``now``, ``round``, ``version`` and, when the scenario discloses them,
    :attr:`resources`. It holds no device profile."""

    __slots__ = ("num_clients", "now", "round", "version", "last_duration", "duration_sum", "arrivals",
                 "last_picked_time", "last_picked_round", "times_picked", "last_loss", "last_samples", "applied",
                 "lost", "timed_out", "cancelled", "deadline_s", "disclosed_data_size", "_resources", "explored",
                 "arrival_clients", "arrival_previous")

    def __init__(self, history: ClientHistory, now: float, round_index: int, version: int,
                 resources: Callable[[], Disclosed] | None, data_size: np.ndarray | None = None,
                 deadline_s: float | None = None) -> None:
        h = history
        self.num_clients = h.num_clients
        self.now = now
        self.round = round_index
        self.version = version
        self.last_duration = _frozen(h.last_duration)
        self.duration_sum = _frozen(h.duration_sum)
        self.arrivals = _frozen(h.arrivals)
        self.last_picked_time = _frozen(h.last_picked_time)
        self.last_picked_round = _frozen(h.last_picked_round)
        self.times_picked = _frozen(h.times_picked)
        self.last_loss = _frozen(h.last_loss)
        self.last_samples = _frozen(h.last_samples)
        self.applied = _frozen(h.applied)
        self.lost = _frozen(h.lost)
        self.timed_out = _frozen(h.timed_out)
        self.cancelled = _frozen(h.cancelled)
        self.explored = h.explored.view()
        """The clients with an applied result, in the order of their first (:attr:`ClientHistory.explored`)."""
        self.arrival_clients = h.arrival_clients.view()
        self.arrival_previous = h.arrival_previous.view()
        """Every arrival's client and that client's previous last duration, in order
        (:attr:`ClientHistory.arrival_clients`): a selector that kept a position in them
        reads only the arrivals since."""
        self._resources = resources
        self.disclosed_data_size = None if data_size is None else _frozen(data_size)
        """Each client's training-set size when the scenario discloses ``data_size`` (else None)."""
        self.deadline_s = deadline_s
        """The sync round's deadline (``mode.deadline_s``), None without one."""

    def mean_duration(self) -> np.ndarray:
        """Each client's mean observed task duration (NaN: no result arrived yet)."""
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(self.arrivals > 0, self.duration_sum / np.maximum(self.arrivals, 1), np.nan)

    @property
    def resources(self) -> Disclosed:
        """What the clients disclose (``selection.disclose``); :class:`NotDisclosed` when
        the scenario discloses nothing."""
        if self._resources is None:
            raise NotDisclosed("the scenario's clients disclose nothing to the selector (set selection.disclose: "
                               "[resources] or [data_size])")
        return self._resources()


class Selector:
    """Base of every selector (built-in or a user's ``module:attribute`` class).

    A subclass sets ``Params`` (a pydantic model of its settings; the file gives them beside
    ``selection.name``) and implements :meth:`select`. It is built once per run with its
    settings and its own seeded generator, lives in the process that runs the clock, and
    may keep state between calls (it is rebuilt and replayed on resume, see the module)."""

    Params: ClassVar[type[BaseModel]] = NoParams
    reads_loss: ClassVar[bool] = False
    """Reads ``view.last_loss`` (the run's checkpoints then log the reported losses)."""
    needs: ClassVar[tuple[str, ...]] = ()
    """What it needs disclosed (a subset of :data:`DISCLOSABLE`); the loader checks it."""
    lazy_candidates: ClassVar[bool] = False
    """Accepts its candidates as a :class:`~fedclock.scheduling.candidate_set.Candidates`
    (count, candidate of a rank, membership, :meth:`~Candidates.array`) instead of an array,
    so the clock does not list them (a pass over the population) for each decision. False
    (every selector that does not say otherwise, users' included): an array."""

    def __init__(self, params: Any, rng: np.random.Generator) -> None:
        self.params = params
        self.rng = rng

    def select(self, view: SelectionView, candidates: Any, k: int) -> np.ndarray:
        """At most ``k`` (at least one) distinct clients among ``candidates`` (idle, available
        client ids in increasing order, as an array; a :class:`Candidates` when
        :attr:`lazy_candidates`; ``0 < k < len(candidates)``), as an integer array."""
        raise NotImplementedError


class SelectorError(Exception):
    """A selector returned something that is not a choice among its candidates (one line
    naming the selector, what it must return and what it returned)."""


def checked_choice(chosen: Any, candidates: np.ndarray | Candidates, k: int, name: str) -> np.ndarray:
    """``chosen`` as sorted client ids, after checking it is 1 to ``k`` distinct candidates,
    given as whole numbers (a selector's mistake is a :class:`SelectorError` naming it).
    Membership is asked of ``candidates`` for the chosen ids only (a binary search in an
    array of sorted candidates; :meth:`Candidates.holds` otherwise)."""
    def refuse(why: str) -> SelectorError:
        try:
            shown = np.asarray(chosen, dtype=object).ravel().tolist()[:10]
        except Exception:  # whatever it returned, the message still names it
            shown = type(chosen).__name__
        return SelectorError(f"selector {name!r} must return 1 to {k} distinct client ids (whole numbers) among the "
                             f"{len(candidates)} candidates; {why} (got {shown})")

    try:
        raw = np.asarray(chosen)
    except Exception:  # a ragged or odd object
        raise refuse("it returned something that is not a list of ids") from None
    if raw.ndim != 1:
        raise refuse(f"it returned a {raw.ndim}-dimensional array")
    if raw.shape[0] and raw.dtype.kind not in "iu":
        raise refuse(f"its ids are of type {raw.dtype}")
    out = np.unique(raw.astype(np.int64))
    if not 1 <= raw.shape[0] <= k:
        raise refuse(f"it returned {raw.shape[0]}")
    if out.shape[0] != raw.shape[0]:
        raise refuse("some ids repeat")
    found = (candidates if isinstance(candidates, Candidates) else Candidates.of_array(candidates)).holds(out)
    if not found.all():
        strangers = out[~found][:5].tolist()
        raise refuse(f"{strangers} are not candidates (busy, unavailable or no client)")
    return out


def overcommitted(k: int, factor: float | None) -> int:
    """Clients dispatched for a cohort of ``k`` with over-commitment ``factor``: ceil(factor k)
    (the product rounded first to 9 decimals, so 1.3 x 10 is 13, not 14)."""
    if factor is None:
        return k
    return int(math.ceil(round(factor * k, 9)))
