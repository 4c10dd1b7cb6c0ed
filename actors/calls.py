"""Calls to one run's actors, and what happens when an actor dies.

An executor that dies (a call's result raises the transport's actor-death error) is replaced
by a fresh one through ``respawn`` and the call re-run there with the same inputs — payload,
client state, task index and so the same seed — hence the same results
(:meth:`ActorCalls.retried`, the one retry loop). A call re-run more than
:data:`MAX_TASK_RETRIES` times in a row ends the run with :class:`ActorLost`; the server actor
dying raises :class:`ServerLost`, after which a run with checkpoints goes on from its last one
on a fresh server (:mod:`fedclock.actors.replay`). A replacement that does not start within
``runtime.respawn_timeout_s`` (no room on the cluster) raises :class:`ActorUnplaced`
(:mod:`fedclock.actors.respawn`).
"""
from __future__ import annotations

from typing import Any, Callable, Sequence, TypeVar

from fedclock.actors.task_io import RESULTS_PER_TASK, TaskInputs, TaskResults, group_results, group_returns
from fedclock.actors.transport import Transport, actor_id, gathered
from fedclock.actors.watchdog import TaskHung

R = TypeVar("R")

MAX_TASK_RETRIES = 3
"""How many times one call (a client task, an evaluation chunk) is re-run on a fresh executor
before the run gives up."""


class ActorLost(Exception):
    """An actor died and the run cannot go on (one line): the server actor in a run without
    checkpoints (:class:`ServerLost`), or a client executor that kept dying on the same task."""


class ActorUnplaced(ActorLost):
    """A lost actor's replacement did not start within ``runtime.respawn_timeout_s`` (no node
    has room for it: a node of the cluster was lost); :mod:`fedclock.actors.respawn`."""


class ServerLost(ActorLost):
    """The server actor died. With ``output.checkpoint_every`` the run restarts from its last
    checkpoint on a fresh server actor (:func:`fedclock.scenarios.experiment.run_scenario`);
    without, this ends the run."""


class ActorCalls:
    """One run's server and executors (a slot per executor; several slots may hold one
    in-process executor), how many tasks each slot holds, and the calls that reach them."""

    def __init__(self, transport: Transport, server: Any, executors: list[Any],
                 respawn: Callable[[int], Any] | None = None) -> None:
        self.t = transport
        self.server = server
        self.executors = executors
        self.load = [0] * len(executors)
        """Tasks sent to each slot and not yet fetched."""
        self.respawns = 0
        """Executors replaced during the run."""
        self._respawn = respawn

    def least_loaded(self) -> int:
        """The slot holding the fewest tasks (the lowest such slot)."""
        return min(range(len(self.executors)), key=self.load.__getitem__)

    def distinct_slots(self) -> list[int]:
        """One slot per distinct executor (the last slot that holds it)."""
        return list({id(e): i for i, e in enumerate(self.executors)}.values())

    def sent(self, inputs: TaskInputs) -> TaskInputs:
        """The inputs as sent: the payload by reference (the executor caches it)."""
        return inputs._replace(payload=self.t.by_reference(inputs.payload))

    def train(self, slot: int, inputs: TaskInputs) -> TaskResults:
        """Start one task on the executor at ``slot``."""
        return TaskResults(*self.t.call(self.executors[slot], "train", self.sent(inputs),
                                        num_returns=RESULTS_PER_TASK))

    def train_group(self, slot: int, method: str, group: list[TaskInputs]) -> list[TaskResults]:
        """Start several tasks in one call (``train_many`` or ``train_each``) at ``slot``; their
        uploads and reports come back as parts of one list each (:func:`~fedclock.actors.task_io.grouped`).
        The tasks go as one list in which tasks with the same payload handle share one
        :class:`~fedclock.actors.transport.ByReference` object, so that pickling writes it (and on
        Ray registers the executor as a borrower of it) once per call rather than once per task."""
        shared: dict[int, TaskInputs] = {}
        sent = []
        for inputs in group:
            first = shared.setdefault(id(inputs.payload), self.sent(inputs))
            sent.append(inputs._replace(payload=first.payload))
        handles = self.t.call(self.executors[slot], method, sent, num_returns=group_returns(len(group)))
        return group_results(handles, len(group))

    def receive(self, meta: Sequence[tuple[int, int, int, int, int | None]], uploads: list[Any]) -> Any:
        """Hand arrivals to the server (``receive_parts``): each group's list of uploads goes once,
        whichever of its parts arrive (:func:`~fedclock.actors.transport.gathered`). Returns the
        handle of the server version."""
        args, picks = gathered(uploads)
        return self.t.call(self.server, "receive_parts", meta, picks, *args)

    def retried(self, what: str, slot: int, fetch: Callable[[], R], rerun: Callable[[], object]) -> R:
        """``fetch()``; while it reports the death of the executor at ``slot``, replace it
        (:meth:`replace`), ``rerun()`` the call and fetch again, at most
        :data:`MAX_TASK_RETRIES` times. Any other error is raised as it is."""
        tries = 0
        while True:
            try:
                return fetch()
            except TaskHung as exc:  # on Ray, the executor's error with Ray's traceback around it
                raise TaskHung(str(getattr(exc, "cause", exc))) from None
            except Exception as exc:
                tries += 1
                if tries > MAX_TASK_RETRIES and self.t.lost_actor(exc) not in (None, actor_id(self.server)):
                    raise ActorLost(f"{what}: its executor died {tries} times in a row (at most {MAX_TASK_RETRIES} "
                                    f"re-runs); see the Ray logs for why the actors die") from None
                self.replace(slot, exc, what)
                rerun()

    def on_executors(self, what: str, work: list[tuple[int, Any]], call: Callable[[int, Any], Any]) -> list[Any]:
        """Run ``call(slot, item)`` for every (slot, item) at once and return the fetched
        results in order (each re-run on a fresh executor if its executor dies)."""
        handles = [call(slot, item) for slot, item in work]
        return [self._fetched(what, handles, k, slot, item, call) for k, (slot, item) in enumerate(work)]

    def _fetched(self, what: str, handles: list[Any], k: int, slot: int, item: Any,
                 call: Callable[[int, Any], Any]) -> Any:
        """``handles[k]`` fetched, ``call(slot, item)`` re-run into it if its executor dies."""
        def fetch() -> Any:
            return self.t.get(handles[k])

        def rerun() -> None:
            handles[k] = call(slot, item)

        return self.retried(what, slot, fetch, rerun)

    def replace(self, slot: int, exc: Exception, what: str) -> None:
        """Re-raise ``exc`` unless it reports the death of the executor at ``slot``; then put a
        fresh executor there (once, however many of its tasks report the death)."""
        lost = self.t.lost_actor(exc)
        if lost is None:
            raise exc
        if lost == actor_id(self.server):
            raise server_lost() from None
        if self._respawn is None:
            raise ActorLost(f"{what}: its executor died and this runtime cannot replace it") from None
        if lost and lost != actor_id(self.executors[slot]):
            return  # this slot's executor was already replaced; just re-run there
        self.executors[slot] = self._respawn(slot)
        self.respawns += 1

    def on_server(self, method: str, *args: Any) -> Any:
        """Call the server and fetch the result (:class:`ServerLost` if it died)."""
        return self.server_get(self.t.call(self.server, method, *args))

    def server_get(self, handle: Any) -> Any:
        """Fetch a handle the server returned (:class:`ServerLost` if it died)."""
        try:
            return self.t.get(handle)
        except Exception as exc:
            if self.t.lost_actor(exc) is None:
                raise
            raise server_lost() from None


def server_lost() -> ServerLost:
    """The one-line error of a server death."""
    return ServerLost("the server actor died; the run cannot go on without a checkpoint to restart from (set "
                      "output.checkpoint_every: N to write one every N server versions; results so far are on disk)")
