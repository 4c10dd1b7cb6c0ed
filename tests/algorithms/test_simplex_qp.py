"""The simplex-constrained QP solver behind FedPAC's classifier collaboration: problems solved
by hand, the projection onto the simplex, and random problems against brute force."""
from __future__ import annotations

import itertools

import pytest
import torch

from fedclock.algorithms.simplex_qp import project_to_simplex, solve_simplex_qp


def brute_force(q: torch.Tensor) -> tuple[float, torch.Tensor]:
    """Best objective over every support set's equality-constrained optimum that is feasible."""
    m = q.shape[0]
    best: tuple[float, torch.Tensor] | None = None
    for r in range(1, m + 1):
        for support in itertools.combinations(range(m), r):
            s = list(support)
            kkt = torch.zeros(r + 1, r + 1, dtype=torch.float64)
            kkt[:r, :r] = 2 * q[s][:, s]
            kkt[:r, r] = 1
            kkt[r, :r] = 1
            rhs = torch.zeros(r + 1, 1, dtype=torch.float64)
            rhs[r] = 1
            sol = torch.linalg.lstsq(kkt, rhs).solution.squeeze(1)
            a = torch.zeros(m, dtype=torch.float64)
            a[s] = sol[:r]
            if (a < -1e-12).any() or abs(float(a.sum()) - 1) > 1e-9:
                continue
            value = float(a @ q @ a)
            if best is None or value < best[0]:
                best = (value, a)
    assert best is not None
    return best


def test_two_by_two_by_hand() -> None:
    # a^T Q a with a = (t, 1 - t): t^2 * 1 + (1 - t)^2 * 3, minimal at t = 3/4
    a = solve_simplex_qp(torch.tensor([[1.0, 0.0], [0.0, 3.0]]))
    torch.testing.assert_close(a, torch.tensor([0.75, 0.25], dtype=torch.float64))
    # unconstrained t* = (b - c) / (a + b - 2c) = (5 - 2) / (1 + 5 - 4) = 1.5 > 1: the vertex (1, 0)
    a = solve_simplex_qp(torch.tensor([[1.0, 2.0], [2.0, 5.0]]))
    torch.testing.assert_close(a, torch.tensor([1.0, 0.0], dtype=torch.float64))
    # diagonal: weights proportional to 1 / d_j = (4, 2, 1) / 7
    a = solve_simplex_qp(torch.diag(torch.tensor([1.0, 2.0, 4.0])))
    torch.testing.assert_close(a, torch.tensor([4.0, 2.0, 1.0], dtype=torch.float64) / 7)


def test_degenerate_sizes() -> None:
    torch.testing.assert_close(solve_simplex_qp(torch.tensor([[2.0]])), torch.ones(1, dtype=torch.float64))
    torch.testing.assert_close(solve_simplex_qp(torch.zeros(4, 4)), torch.full((4,), 0.25, dtype=torch.float64))
    with pytest.raises(ValueError, match="square"):
        solve_simplex_qp(torch.zeros(2, 3))


def test_projection_onto_simplex() -> None:
    torch.testing.assert_close(project_to_simplex(torch.tensor([0.5, 0.5, 0.5])), torch.full((3,), 1 / 3))
    torch.testing.assert_close(project_to_simplex(torch.tensor([2.0, 0.0])), torch.tensor([1.0, 0.0]))
    # theta = (0.6 + 0.2 - 1) / 2 = -0.1: (0.7, 0.3, 0)
    torch.testing.assert_close(project_to_simplex(torch.tensor([0.6, 0.2, -1.0])), torch.tensor([0.7, 0.3, 0.0]))


@pytest.mark.parametrize("semidefinite", [False, True])
def test_random_problems_match_brute_force(semidefinite: bool) -> None:
    g = torch.Generator().manual_seed(3)
    for _ in range(25):
        m = int(torch.randint(2, 6, (1,), generator=g))
        d = int(torch.randint(1, 5, (1,), generator=g))
        u = torch.randn(d, m, generator=g, dtype=torch.float64)
        v = torch.zeros(m, dtype=torch.float64) if semidefinite else torch.rand(m, generator=g, dtype=torch.float64)
        q = u.T @ u + torch.diag(v)
        a = solve_simplex_qp(q)
        assert (a >= 0).all() and abs(float(a.sum()) - 1) < 1e-12
        best, best_a = brute_force(q)
        assert float(a @ q @ a) <= best + 1e-9 * (1 + abs(best))
        if not semidefinite:  # strictly convex: the minimizer is unique
            torch.testing.assert_close(a, best_a, atol=1e-7, rtol=0)
