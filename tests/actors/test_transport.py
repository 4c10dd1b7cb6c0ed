"""Handles of parts of a group's results: fetched once per group, passed once per group."""
from __future__ import annotations

from typing import Any

from fedclock.actors.server import Server
from fedclock.actors.task_io import group_results, group_returns, grouped
from fedclock.actors.transport import InlineTransport, Part, fetched, gathered, picked


def test_fetched_gets_each_underlying_handle_once_in_one_call() -> None:
    a, b, c = object(), object(), object()
    store = {id(a): ["a0", "a1", "a2"], id(b): ["b0"], id(c): "c"}
    calls: list[list[Any]] = []

    def get_many(handles: list[Any]) -> list[Any]:
        calls.append(handles)
        return [store[id(h)] for h in handles]

    assert fetched([Part(a, 2), Part(b, 0), Part(a, 0), c], get_many) == ["a2", "b0", "a0", "c"]
    assert len(calls) == 1 and [id(h) for h in calls[0]] == [id(a), id(b), id(c)]


def test_gathered_passes_each_list_once_and_picked_undoes_it() -> None:
    first, second, alone = ["u0", "u1", "u2"], ["v0", "v1"], "w"
    handles = [Part(first, 1), Part(second, 0), alone, Part(first, 0)]
    args, picks = gathered(handles)
    assert args == [first, second, alone] and picks == [(0, 1), (1, 0), (2, -1), (0, 0)]
    assert picked(picks, args) == ["u1", "v0", "w", "u0"]
    assert InlineTransport().get(handles) == ["u1", "v0", "w", "u0"]


def test_grouped_results_map_back_to_each_task() -> None:
    """A group call's values (uploads list, reports list, each state) give every task its own
    upload, state and report handles, in task order."""
    results = [("up0", "s0", "r0"), ("up1", None, "r1"), ("up2", "s2", "r2")]
    values = grouped(results)
    assert len(values) == group_returns(3)
    t = InlineTransport()
    out = [tuple(t.get(h) for h in (r.upload, r.state, r.report)) for r in group_results(values, 3)]
    assert out == results


def test_server_receive_parts_equals_receive() -> None:
    """``receive_parts`` applies exactly the picked uploads, in the order given."""
    seen: list[tuple[Any, ...]] = []

    class Recording(Server):
        def receive(self, meta: Any, *uploads: Any) -> int:
            seen.append(uploads)
            return 7

    assert Recording().receive_parts([], [(1, 0), (0, -1)], "x", ["y"]) == 7
    assert seen == [("y", "x")]


def test_a_group_call_sends_one_list_sharing_one_reference_per_payload() -> None:
    """``ActorCalls.train_group`` sends the group's tasks as one list argument, and tasks with the
    same payload handle carry the same ``ByReference`` object (pickled once per call)."""
    from fedclock.actors.calls import ActorCalls
    from fedclock.actors.task_io import TaskInputs
    from fedclock.actors.transport import ByReference

    sent: list[tuple[Any, ...]] = []

    class Recording(InlineTransport):
        def call(self, actor: Any, method: str, *args: Any, num_returns: int = 1) -> Any:
            sent.append(args)
            return grouped([(f"up{k}", None, f"r{k}") for k in range(len(args[0]))])

        def by_reference(self, handle: Any) -> Any:
            return ByReference(handle)

    one, other = {"w": 1}, {"w": 2}
    tasks = [TaskInputs(c, 0, p, None, None) for c, p in enumerate([one, one, other, one])]
    results = ActorCalls(Recording(), None, [object()]).train_group(0, "train_each", tasks)
    (group,), = sent
    assert [t.client for t in group] == [0, 1, 2, 3]
    assert group[0].payload is group[1].payload is group[3].payload and group[0].payload.ref is one
    assert group[2].payload is not group[0].payload and group[2].payload.ref is other
    assert [InlineTransport().get(r.upload) for r in results] == ["up0", "up1", "up2", "up3"]
