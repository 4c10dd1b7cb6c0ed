"""One run's backend for the clock: a facade over the run's actors.

``Session`` implements the clock's :class:`~fedclock.scheduling.clock.Backend` — start a task
on an executor now, hand arrivals to the server, evaluate — with a few collaborators, each
with one job: the calls to the actors and their retries (:mod:`fedclock.actors.calls`), the
tasks on their way to the executors (:mod:`fedclock.actors.launcher`), each client's kept
state and the deferred tasks (:mod:`fedclock.actors.client_states`), the payload handles
(:mod:`fedclock.actors.payloads`) and the evaluations (:mod:`fedclock.actors.evaluation`).
For checkpoints it also hands out the server's state and a running task's inputs, and puts
them back (:mod:`fedclock.actors.replay`). The session keeps its running work by task index.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np

from fedclock.actors.calls import ActorCalls
from fedclock.actors.client_states import ClientStates, Deferred
from fedclock.actors.evaluation import Evaluation
from fedclock.actors.launcher import InFlight, Launcher
from fedclock.actors.payloads import PayloadCache
from fedclock.actors.task_io import TaskInputs, TaskReport
from fedclock.actors.transport import Transport
from fedclock.algorithms.base import EvalResult, ServerState, Tensors
from fedclock.scheduling.task import Applied, Reported, Task


@dataclass(frozen=True)
class AlgorithmTraits:
    """What the session needs to know of the run's algorithm."""

    name: str
    stateless: bool = False
    """It declares ``stateless_clients`` (checked on every kept result)."""
    hears_failures: bool = False
    """It has a failure hook (:meth:`~fedclock.algorithms.base.Algorithm.server_task_failed`)."""
    personalized: bool = False
    """Evaluations include each client's personalized model (``evaluation.personalized``)."""


class Session:
    """One run's backend for the clock (see the module's docstring)."""

    def __init__(self, calls: ActorCalls, launcher: Launcher, states: ClientStates, payloads: PayloadCache,
                 evaluation: Evaluation, algorithm: AlgorithmTraits) -> None:
        self.calls = calls
        self.launcher = launcher
        self.states = states
        self.payloads = payloads
        self.evaluation = evaluation
        self.algorithm = algorithm
        self.version = 0
        self.client_results: list[EvalResult] = []
        """Each client's personalized result (client id order) at the last evaluation."""
        self.running: dict[int, InFlight | Deferred] = {}
        """Started tasks not yet applied or released, by task index."""
        self.clients_evaluated: Callable[[list[EvalResult]], None] | None = None
        """Where each personalized evaluation's per-client results go (the recorder)."""
        self.clients_adapted: Callable[[list[EvalResult]], None] | None = None
        """Where each adapted evaluation's per-client results go (``evaluation.adapted``; the recorder)."""
        self.after_evaluation: Callable[[], None] | None = None
        """Called at the end of each evaluation computed here (an analysis at chosen versions)."""

    # ------------------------------------------------------------------ what tests and analyses read
    @property
    def t(self) -> Transport:
        return self.calls.t

    @property
    def server(self) -> Any:
        return self.calls.server

    @property
    def executors(self) -> list[Any]:
        return self.calls.executors

    @property
    def respawns(self) -> int:
        return self.calls.respawns

    @property
    def client_state(self) -> dict[int, Any]:
        """Each client's kept state (a handle); see :class:`ClientStates`."""
        return self.states.kept

    def slot_of(self, task: Task) -> int:
        """The executor slot running ``task`` (-1: not sent yet)."""
        running = self.running[task.index]
        return running.slot if isinstance(running, InFlight) else -1

    # ------------------------------------------------------------------ Backend
    def start(self, task: Task) -> None:
        payload = self.payloads.for_client(task.client, self.version)
        if task.upload_discarded:  # only its client state can matter: computed when first needed
            inputs = TaskInputs(task.client, task.client_task, payload, self.states.latest(task.client), task.steps)
            self.running[task.index] = Deferred(inputs)
            return
        self._launch(task, payload, self.states.settled(task.client))

    def _launch(self, task: Task, payload: Any, state: Any) -> None:
        inputs = TaskInputs(task.client, task.client_task, payload, state, task.steps)
        self.running[task.index] = self.launcher.launch(inputs, task.dispatched_at)

    def _in_flight(self, task: Task) -> InFlight:
        running = self.running[task.index]
        assert isinstance(running, InFlight)
        return running

    def apply(self, tasks: Sequence[Task]) -> Applied:
        self.launcher.flush()
        running = [self._in_flight(t) for t in tasks]
        reports = self.launcher.reports(running)
        meta = [(t.client, t.num_samples, t.version, int(t.staleness or 0), r.steps) for t, r in zip(tasks, reports)]
        uploads = [r.handles().upload for r in running]
        version = self.calls.server_get(self.calls.receive(meta, uploads))
        for t, report in zip(tasks, reports):
            self._free_slot(t, report)
        self.version = int(version)
        self.states.settle_due(self.version)  # bounds the payloads held for deferred work
        return Applied(self.version, [Reported(dict(r.metrics), r.steps) for r in reports])

    def release(self, task: Task, keep_state: bool) -> None:
        running = self.running[task.index]
        if isinstance(running, Deferred):
            del self.running[task.index]
            if keep_state:
                self.states.defer(task.client, running, task.version)
            return
        self.launcher.flush()
        self._free_slot(task, self.launcher.report(running) if keep_state else None)

    def _free_slot(self, task: Task, report: TaskReport | None) -> None:
        """Free the task's executor slot; with its ``report`` (None: its result is not kept),
        keep the client's returned state — or, when it returned none (stateless algorithms),
        hold no reference for the client (a later task gets None, exactly as from a kept None)."""
        running = self.running.pop(task.index)
        assert isinstance(running, InFlight)
        self.launcher.done(running)
        if report is None:
            return
        if report.state_kept and self.algorithm.stateless:
            raise RuntimeError(f"algorithm {self.algorithm.name!r} declares stateless_clients but client "
                               f"{task.client}'s task returned a client state; set stateless_clients = False "
                               f"in its class")
        self.states.keep(task.client, running.handles().state if report.state_kept else None)

    def failed(self, task: Task) -> None:
        if self.algorithm.hears_failures:
            reason = "lost" if task.lost else "timed_out"
            self.calls.on_server("task_failed", task.client, task.version, reason)

    def evaluate(self) -> dict[str, float]:
        self.launcher.flush()
        state_ref = self.evaluation.global_state()
        g = self.evaluation.global_result(state_ref)
        out = {"global_accuracy": g.accuracy, "global_loss": g.loss, **self.calls.on_server("metrics")}
        if self.algorithm.personalized:
            self.states.settle_all()
            clients = range(self.evaluation.num_clients)
            payloads = [self.payloads.for_client(c, self.version) for c in clients]
            self.client_results = self.evaluation.personalized(payloads, [self.states.kept.get(c) for c in clients])
            accs = np.array([r.accuracy for r in self.client_results if r.count > 0])
            out.update(personal_accuracy_mean=float(np.mean(accs)), personal_accuracy_p10=float(np.quantile(accs, 0.1)),
                       personal_accuracy_p90=float(np.quantile(accs, 0.9)))
            if self.clients_evaluated is not None:
                self.clients_evaluated(self.client_results)
        if self.evaluation.adaptation is not None:  # evaluation only: no state, no clock, no training stream
            adapted = self.evaluation.adapted(state_ref)
            accs = np.array([r.accuracy for r in adapted if r.count > 0])
            out.update(adapted_accuracy_mean=float(np.mean(accs)), adapted_accuracy_p10=float(np.quantile(accs, 0.1)),
                       adapted_accuracy_p90=float(np.quantile(accs, 0.9)))
            if self.clients_adapted is not None:
                self.clients_adapted(adapted)
        if self.after_evaluation is not None:
            self.after_evaluation()
        return out

    # ------------------------------------------------------------------ after a run, analyses
    def final_states(self) -> tuple[Any, dict[int, Any]]:
        """The server's global state and every client's kept state (fetched), after a run."""
        self.launcher.flush()
        self.states.settle_all()
        server_state = self.calls.on_server("current_state")
        clients = sorted(self.states.kept)
        values = self.t.get([self.states.kept[c] for c in clients]) if clients else []
        return server_state, dict(zip(clients, values))

    def payload(self, client: int) -> Tensors:
        """The server's current payload for ``client`` (fetched; for post-run analyses)."""
        return self.calls.on_server("payload_for", client)

    def kept_state(self, client: int) -> Any:
        """The handle of ``client``'s latest kept state (None: none), its deferred tasks run first."""
        return self.states.settled(client)

    def settle_all(self) -> None:
        """Every client's latest state computed (before reading all of them)."""
        self.states.settle_all()

    # ------------------------------------------------------------------ checkpoints (fedclock.actors.replay)
    def task_inputs(self, task: Task) -> tuple[Any, Any]:
        """A running task's payload and client state as handed to it at its start (handles)."""
        inputs = self.running[task.index].inputs
        return inputs.payload, self.states.resolved(inputs.state)

    def server_snapshot(self) -> tuple[ServerState, int]:
        """The server's global state and receive count."""
        state, receives = self.calls.on_server("snapshot")
        return state, int(receives)

    def restore(self, state: ServerState, receives: int, clients: dict[int, Tensors | None]) -> None:
        """Put the server and every client's kept state back to a checkpoint's."""
        self.version = int(self.calls.on_server("restore", state, receives))
        self.states.restore({c: self.t.put(v) for c, v in clients.items()})
        self.payloads.clear()

    def restart(self, task: Task, payload: Any, state: Any) -> None:
        """Start ``task`` from saved inputs (handles from ``t.put``), as :meth:`start` did
        before a restore."""
        self._launch(task, payload, state)
