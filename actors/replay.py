"""Checkpoints and resumption by deterministic replay.

:class:`CheckpointingBackend` sits between the clock and a :class:`~fedclock.actors.session.Session`.
It keeps the tasks the session is computing (started, not yet applied or released) and a log
of what the clock got back (the version of every ``apply``, the metrics of every
``evaluate``). Right after an ``apply`` that brings the server to a new version that is a
multiple of ``every``, it hands a :class:`~fedclock.actors.checkpoint.Checkpoint` to
``save``: the server's state and receive count, every client's kept state, the inputs of
every running task, the row counts of the results tables and the logs.

Resuming from a checkpoint runs the same scenario's clock from ``t = 0`` in *replay*: until
the clock has made as many ``apply`` calls as the checkpoint logged, ``start`` only notes the
task, ``apply`` and ``evaluate`` return the logged version and metrics, ``release`` does
nothing, and nothing is computed. The clock's SimPy processes and its cohort generator thus
go through exactly the steps of the original run (the clock is deterministic by contract,
and cannot be pickled). At that ``apply`` — the *switch* — the server and the clients' kept
states are restored, every running task is started again from its saved inputs (same
payload, client state, task index and steps, so the same seed and the same result), and
``on_switch`` lets the recorder take back the rows written before the checkpoint. From then
on every call goes to the real session. Training and server random draws need no saving:
they are seeded by (seed, stream, client, task index) and (seed, server receive count).
"""
from __future__ import annotations

from typing import Any, Callable, Sequence

from fedclock.actors.checkpoint import Checkpoint, CheckpointError, RunningTask
from fedclock.actors.session import Session
from fedclock.scheduling.task import Applied, Reported, Task


class CheckpointingBackend:
    """The clock's backend in a run that writes checkpoints, resumes from one, or both."""

    def __init__(self, session: Session, *, every: int | None, save: Callable[[Checkpoint], object] | None,
                 rows: Callable[[], dict[str, int]], resume: Checkpoint | None = None,
                 on_switch: Callable[[Checkpoint], None] | None = None, log_losses: bool = False) -> None:
        self.session = session
        self.every = every
        self._save = save
        self._rows = rows
        self._resume = resume
        self._on_switch = on_switch
        self.replaying = resume is not None
        self.running: dict[int, Task] = {}
        """Tasks started and not yet applied or released, by index."""
        self.applies: list[int] = []
        self.evaluations: list[dict[str, float]] = []
        self.version = 0
        self.written: list[int] = []
        """Versions checkpointed by this backend."""
        self.losses: list[float | None] | None = [] if log_losses else None
        """The ``train_loss`` of every applied task, in order (for a selector that reads
        them: the replay hands them back, :mod:`fedclock.scheduling.selection`)."""

    # ------------------------------------------------------------------ Backend
    def start(self, task: Task) -> None:
        self.running[task.index] = task
        if not self.replaying:
            self.session.start(task)

    def apply(self, tasks: Sequence[Task]) -> Applied:
        if self.replaying:
            assert self._resume is not None
            version = self._resume.applies[len(self.applies)]
            for t in tasks:
                self.running.pop(t.index, None)
            reports = [Reported({}, None) for _ in tasks]
            if self.losses is not None:
                logged = self._resume.losses or []
                for k in range(len(tasks)):
                    loss = logged[len(self.losses)] if len(self.losses) < len(logged) else None
                    self.losses.append(loss)
                    reports[k] = Reported({} if loss is None else {"train_loss": loss}, None)
            self._log(version)
            if len(self.applies) == len(self._resume.applies):
                reports = self._switch(self._resume, tasks)
            return Applied(version, reports)
        applied = self.session.apply(tasks)
        for t in tasks:
            self.running.pop(t.index, None)
        if self.losses is not None:
            self.losses.extend(_loss(r.metrics) for r in applied.reports)
        before = self.version
        self._log(applied)
        if self.every is not None and self._save is not None and applied != before and applied % self.every == 0:
            self._save(self.snapshot(applied.reports))
            self.written.append(int(applied))
        return applied

    def release(self, task: Task, keep_state: bool) -> None:
        self.running.pop(task.index, None)
        if not self.replaying:
            self.session.release(task, keep_state)

    def failed(self, task: Task) -> None:
        if not self.replaying:  # a checkpoint's server state already holds what the hook did
            self.session.failed(task)

    def evaluate(self) -> dict[str, float]:
        if self.replaying:
            assert self._resume is not None
            if len(self.evaluations) >= len(self._resume.evaluations):
                raise CheckpointError("replay diverged: the clock evaluated more often than the checkpoint logged")
            metrics = dict(self._resume.evaluations[len(self.evaluations)])
        else:
            metrics = self.session.evaluate()
        self.evaluations.append(dict(metrics))
        return metrics

    def finished(self) -> None:
        """The clock returned; a replay that never reached its checkpoint is an error."""
        if self.replaying:
            raise CheckpointError(f"replay diverged: the run ended after {len(self.applies)} server updates, before "
                                  f"the checkpoint's {len(self._resume.applies) if self._resume else 0}")

    # ------------------------------------------------------------------ checkpoints
    def _log(self, version: int) -> None:
        self.applies.append(int(version))
        self.version = int(version)

    def snapshot(self, applied: Sequence[Reported]) -> Checkpoint:
        """The run's state now, right after an ``apply`` whose tasks reported ``applied``,
        fetched from the actors."""
        s = self.session
        server, receives = s.server_snapshot()
        s.settle_all()  # deferred tasks' states are part of the checkpoint
        clients = sorted(s.client_state)
        states = _fetch(s, [s.client_state[c] for c in clients])
        tasks = sorted(self.running.values(), key=lambda t: t.index)
        inputs = [s.task_inputs(t) for t in tasks]
        distinct: dict[int, int] = {}
        handles: list[Any] = []
        for payload, _ in inputs:
            if id(payload) not in distinct:
                distinct[id(payload)] = len(handles)
                handles.append(payload)
        payloads = s.t.get(handles) if handles else []
        task_states = _fetch(s, [state for _, state in inputs])
        return Checkpoint(
            version=self.version, server=server, receives=receives, clients=dict(zip(clients, states)),
            payloads=list(payloads),
            tasks=[RunningTask(t.index, t.client, distinct[id(p)], st)
                   for t, (p, _), st in zip(tasks, inputs, task_states)],
            rows=self._rows(), applies=list(self.applies), evaluations=[dict(m) for m in self.evaluations],
            applied=[{k: float(v) for k, v in r.metrics.items()} for r in applied],
            applied_steps=[r.steps for r in applied],
            losses=None if self.losses is None else list(self.losses))

    def _switch(self, ckpt: Checkpoint, applied: Sequence[Task]) -> list[Reported]:
        """The replay reached the checkpoint: restore the actors and restart its running tasks;
        returns what the tasks of the checkpointed ``apply`` reported."""
        saved = {t.index: t for t in ckpt.tasks}
        if set(saved) != set(self.running) or any(self.running[i].client != t.client for i, t in saved.items()) \
                or self.version != ckpt.version or len(applied) != len(ckpt.applied):
            raise CheckpointError(f"replay diverged: at the checkpoint of version {ckpt.version} the replayed run has "
                                  f"version {self.version} and running tasks {sorted(self.running)}, the checkpoint "
                                  f"{sorted(saved)}")
        steps = ckpt.applied_steps or [None] * len(applied)
        reports = [Reported(dict(metrics), done) for metrics, done in zip(ckpt.applied, steps)]
        s = self.session
        s.restore(ckpt.server, ckpt.receives, ckpt.clients)
        payloads = [s.t.put(p) for p in ckpt.payloads]
        for index in sorted(saved):
            kept = saved[index]
            s.restart(self.running[index], payloads[kept.payload], None if kept.state is None else s.t.put(kept.state))
        self.replaying = False
        if self._on_switch is not None:
            self._on_switch(ckpt)
        return reports


def _loss(metrics: dict[str, float]) -> float | None:
    loss = metrics.get("train_loss")
    return None if loss is None else float(loss)


def _fetch(session: Session, handles: list[Any]) -> list[Any]:
    """The values of transport handles, None staying None."""
    present = [h for h in handles if h is not None]
    values = iter(session.t.get(present) if present else [])
    return [None if h is None else next(values) for h in handles]
