"""Each client's kept state, and the tasks whose computation waits until that state is needed.

Actors hold resources, not truth: a client's state between its tasks is a handle the session
keeps here (an object reference on Ray). A task whose upload the clock knows at dispatch to be
discarded (the server gives up on it, or drops it as late) changes nothing but the client
state it leaves, so its computation is *deferred* (:class:`Deferred`) until that state is
first needed: the client's next task, a personalized evaluation, the final states, a
checkpoint, or :data:`DEFER_VERSIONS` server versions after its dispatch (which bounds the
payloads held for it). A deferred task whose state is never needed (the run ends first, or
its release keeps no state) never runs. When it does run, it runs with the inputs it was
dispatched with (payload, state, task index and so seed), so the tables are those of running
it at once, bit for bit; the deferred tasks of several clients needed at once run together.

This module computes nothing itself: :class:`ClientStates` is handed a ``run`` function that
runs a batch of tasks at once and returns the state handle each leaves
(:meth:`fedclock.actors.launcher.Launcher.run_now`), so it is tested with a fake one
(tests/actors/test_client_states.py).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from fedclock.actors.task_io import TaskInputs

DEFER_VERSIONS = 16
"""How many server versions a deferred task may wait: at each version, the clients whose
oldest deferred task was dispatched more than this many versions ago have their deferred
tasks run. Each deferred task holds the payload it was dispatched with, so this bounds the
payloads kept alive for deferred work to about this many versions."""

Runner = Callable[[list[TaskInputs]], list[Any]]
"""Runs tasks at once; returns the handle of the state each leaves (None: none)."""


@dataclass(eq=False)
class Deferred:
    """A task whose computation waits until the client state it leaves is needed. Its
    ``inputs.state`` may be another :class:`Deferred` (the client's previous task)."""

    inputs: TaskInputs
    ran: bool = False
    kept: Any = None
    """Once it ran: the handle of the client state it left (None: none)."""


class ClientStates:
    """The handle of each client's latest kept state, some of them still to compute."""

    def __init__(self, run: Runner, defer_versions: int | None = None) -> None:
        self._run = run
        self.defer_versions = DEFER_VERSIONS if defer_versions is None else defer_versions
        self.kept: dict[int, Any] = {}
        """Each client's kept state (a handle); a client in :attr:`deferred` has a newer one,
        still to compute."""
        self.deferred: dict[int, Deferred] = {}
        """Clients whose latest state is that of a deferred task, not run yet."""
        self._since: dict[int, int] = {}
        """For each client in :attr:`deferred`: the dispatch version of its oldest deferred task."""

    def latest(self, client: int) -> Any:
        """What a deferred task of ``client`` starts from: its latest state, computed or not."""
        return self.deferred.get(client, self.kept.get(client))

    def settled(self, client: int) -> Any:
        """The handle of ``client``'s latest state (None: none), its deferred tasks run first."""
        self.settle([client])
        return self.kept.get(client)

    def keep(self, client: int, handle: Any) -> None:
        """``client``'s state is now ``handle`` (None: it has none)."""
        if handle is None:
            self.kept.pop(client, None)
        else:
            self.kept[client] = handle

    def defer(self, client: int, task: Deferred, version: int) -> None:
        """``task`` (dispatched at server ``version``) finished and its state is ``client``'s
        latest, to compute when needed."""
        chained = client in self.deferred  # its state starts from a deferred one
        self._since[client] = self._since[client] if chained else version
        self.deferred[client] = task

    def settle_due(self, version: int) -> None:
        """At server ``version``: run the deferred tasks that waited too long."""
        horizon = version - self.defer_versions
        self.settle(sorted(c for c, since in self._since.items() if since < horizon))

    def settle_all(self) -> None:
        """Every client's latest state computed (before reading all of them)."""
        self.settle(sorted(self.deferred))

    def settle(self, clients: list[int]) -> None:
        """Run the deferred tasks of ``clients`` and keep the states they leave."""
        pending = [(c, self.deferred.pop(c)) for c in clients if c in self.deferred]
        for c, _ in pending:
            self._since.pop(c, None)
        self._run_chains([_chain(task) for _, task in pending])
        for c, task in pending:
            self.keep(c, task.kept)

    def resolved(self, state: Any) -> Any:
        """``state`` as a handle: a :class:`Deferred` is run (after the deferred tasks its own
        state depends on) and the state it left returned; a handle as it is."""
        if not isinstance(state, Deferred):
            return state
        self._run_chains([_chain(state)])
        return state.kept

    def restore(self, kept: dict[int, Any]) -> None:
        """Put back a checkpoint's states (handles); nothing is deferred."""
        self.kept = dict(kept)
        self.deferred, self._since = {}, {}

    def _run_chains(self, chains: list[tuple[list[Deferred], Any]]) -> None:
        """Run several clients' chains of deferred tasks: the first tasks of every chain at
        once, then the second ones, and so on; each task runs once, from the state its
        predecessor left."""
        states = [start for _, start in chains]
        for k in range(max((len(chain) for chain, _ in chains), default=0)):
            step = [(i, chain[k]) for i, (chain, _) in enumerate(chains) if k < len(chain)]
            for i, task in step:
                task.inputs = task.inputs._replace(state=states[i])
            kept = self._run([task.inputs for _, task in step])
            for (i, task), handle in zip(step, kept):
                task.ran = True
                task.kept = states[i] = handle


def _chain(task: Deferred) -> tuple[list[Deferred], Any]:
    """The deferred tasks not run yet that ``task``'s state depends on, oldest first, ending
    with ``task`` itself, and the handle of the state the oldest starts from."""
    chain: list[Deferred] = []
    link: Any = task
    while isinstance(link, Deferred) and not link.ran:
        chain.append(link)
        link = link.inputs.state
    return chain[::-1], (link.kept if isinstance(link, Deferred) else link)
