"""Kept client states and deferred tasks (:mod:`fedclock.actors.client_states`), with a fake
runner: a "state" is a string, and running a task appends ``+<client>.<task index>`` to the
state it starts from, so every expected value below is written out by hand."""
from __future__ import annotations

from typing import Any

from fedclock.actors.client_states import ClientStates, Deferred
from fedclock.actors.task_io import TaskInputs


class FakeRunner:
    """Records each batch it is asked to run; ``stateless`` clients return no state."""

    def __init__(self, stateless: frozenset[int] = frozenset()) -> None:
        self.batches: list[list[tuple[int, int, Any]]] = []
        self.stateless = stateless

    def __call__(self, tasks: list[TaskInputs]) -> list[Any]:
        self.batches.append([(t.client, t.client_task, t.state) for t in tasks])
        return [None if t.client in self.stateless else f"{t.state or ''}+{t.client}.{t.client_task}"
                for t in tasks]


def _deferred(states: ClientStates, client: int, task: int) -> Deferred:
    return Deferred(TaskInputs(client, task, "payload", states.latest(client), None))


def test_a_deferred_task_runs_only_when_its_state_is_needed() -> None:
    run = FakeRunner()
    states = ClientStates(run, defer_versions=16)
    states.keep(0, "s")
    states.defer(0, _deferred(states, 0, 1), version=3)
    assert run.batches == [] and states.kept == {0: "s"}  # nothing computed yet
    assert states.settled(0) == "s+0.1"
    assert run.batches == [[(0, 1, "s")]] and states.kept == {0: "s+0.1"}
    assert states.settled(0) == "s+0.1" and len(run.batches) == 1  # runs once


def test_a_chain_runs_in_order_and_clients_run_together() -> None:
    run = FakeRunner()
    states = ClientStates(run, defer_versions=16)
    states.defer(0, _deferred(states, 0, 0), version=0)
    states.defer(0, _deferred(states, 0, 1), version=1)  # starts from the deferred 0.0
    states.keep(1, "k")
    states.defer(1, _deferred(states, 1, 5), version=1)
    states.settle_all()
    # step 1: the first task of each chain at once; step 2: client 0's second task
    assert run.batches == [[(0, 0, None), (1, 5, "k")], [(0, 1, "+0.0")]]
    assert states.kept == {0: "+0.0+0.1", 1: "k+1.5"}


def test_waiting_is_bounded_by_server_versions() -> None:
    """defer_versions 2: at version v the clients whose oldest deferred task was dispatched
    before v - 2 run; a chained task keeps its chain's oldest dispatch version."""
    run = FakeRunner()
    states = ClientStates(run, defer_versions=2)
    states.defer(0, _deferred(states, 0, 0), version=1)
    states.defer(0, _deferred(states, 0, 1), version=4)  # chained: still counted from version 1
    states.defer(1, _deferred(states, 1, 0), version=2)
    states.settle_due(3)  # horizon 1: nobody dispatched before version 1
    assert run.batches == []
    states.settle_due(4)  # horizon 2: client 0 (since 1)
    assert [[c for c, _, _ in b] for b in run.batches] == [[0], [0]] and 1 in states.deferred
    states.settle_due(5)  # horizon 3: client 1 (since 2)
    assert states.kept == {0: "+0.0+0.1", 1: "+1.0"} and states.deferred == {}


def test_a_task_that_returns_no_state_drops_the_kept_one() -> None:
    states = ClientStates(FakeRunner(stateless=frozenset({2})), defer_versions=16)
    states.keep(2, "old")
    states.defer(2, _deferred(states, 2, 0), version=0)
    assert states.settled(2) is None and 2 not in states.kept


def test_a_running_task_s_state_is_resolved_and_unneeded_work_never_runs() -> None:
    """A checkpoint asks for a running deferred task's input state: its predecessors run,
    not the task itself; a deferred task that is never released with its state never runs."""
    run = FakeRunner()
    states = ClientStates(run, defer_versions=16)
    states.defer(0, _deferred(states, 0, 0), version=0)
    running = _deferred(states, 0, 1)  # started, not released
    assert states.resolved(running.inputs.state) == "+0.0" and run.batches == [[(0, 0, None)]]
    assert states.resolved("handle") == "handle"
    states.restore({0: "restored"})
    states.settle_all()
    assert len(run.batches) == 1 and states.kept == {0: "restored"}
