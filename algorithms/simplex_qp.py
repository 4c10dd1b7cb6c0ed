"""Convex quadratic programs over the probability simplex.

``min_a a^T Q a  subject to  a >= 0, sum(a) = 1`` for a symmetric positive semi-definite
``Q``. FedPAC solves one per client to weight the classifier heads it combines; the helper
is generic (any small PSD ``Q``).

Solver: the primal active-set method for convex quadratic programs (Nocedal & Wright,
*Numerical Optimization*, 2nd ed., Algorithm 16.3) specialized to the simplex, in float64.
It starts at the best vertex, solves the equality-constrained problem on the current
support exactly (a KKT linear system), steps back to the boundary when that solution leaves
the simplex (dropping the coordinate that hits zero), and otherwise adds the coordinate with
the most negative multiplier ``g_j - a^T g`` (``g = 2 Q a``) until none is negative. The
answer is exact up to floating point and the tolerance on the multipliers; a ridge of
``1e-12`` times the largest diagonal entry keeps every support system non-singular when
``Q`` is only semi-definite. The tests compare it with a brute-force solution that
enumerates every support set, and with a 2x2 problem solved by hand.
"""
from __future__ import annotations

import numpy as np
import torch


def project_to_simplex(v: torch.Tensor) -> torch.Tensor:
    """The Euclidean projection of a vector onto ``{a : a >= 0, sum(a) = 1}`` (sorting method)."""
    if v.dim() != 1 or v.numel() == 0:
        raise ValueError(f"project_to_simplex: need a non-empty vector, got shape {tuple(v.shape)}")
    u, _ = torch.sort(v, descending=True)
    css = torch.cumsum(u, dim=0) - 1.0
    k = torch.arange(1, v.numel() + 1, dtype=v.dtype, device=v.device)
    rho = int(torch.nonzero((u - css / k) > 0).max()) + 1
    return torch.clamp(v - css[rho - 1] / rho, min=0.0)


def _support_solution(q: np.ndarray, support: list[int]) -> np.ndarray:
    """argmin of ``a^T q a`` on the affine hull ``sum(a_S) = 1`` of a support ``S``."""
    k = len(support)
    kkt = np.zeros((k + 1, k + 1))
    kkt[:k, :k] = 2.0 * q[np.ix_(support, support)]
    kkt[:k, k] = 1.0
    kkt[k, :k] = 1.0
    rhs = np.zeros(k + 1)
    rhs[k] = 1.0
    return np.linalg.solve(kkt, rhs)[:k]


def qp_flops(m: int) -> int:
    """FLOPs charged for one :func:`solve_simplex_qp` of an ``m x m`` problem (a stated
    formula: the solve runs in NumPy, which no counter sees). The active-set method adds one
    coordinate per iteration in the usual case, so ``m`` iterations; iteration ``k`` solves a
    ``(k + 1)``-square KKT system by LU (``2 (k + 1)^3 / 3`` FLOPs) and forms the gradient
    ``2 Q a`` (``2 m^2``). A 1x1 problem costs nothing."""
    if m <= 1:
        return 0
    return sum(2 * (k + 1) ** 3 // 3 + 2 * m * m for k in range(1, m + 1))


def solve_simplex_qp(q: torch.Tensor, tol: float = 1e-12) -> torch.Tensor:
    """A minimizer of ``a^T q a`` over the probability simplex (float64 CPU tensor).

    ``q`` must be square, symmetric and positive semi-definite (it is symmetrized as
    ``(q + q^T) / 2``). A 1x1 problem returns ``[1]``; an all-zero ``q`` (every point optimal)
    returns uniform weights. ``tol`` is relative to the largest diagonal entry.

    A *meta* ``q`` (a counted server step, :mod:`fedclock.algorithms.server_cost`) has no
    values to solve for: it gets the uniform weights (as meta), and the solve is charged by
    :func:`qp_flops` instead.
    """
    if q.dim() != 2 or q.shape[0] != q.shape[1] or q.shape[0] == 0:
        raise ValueError(f"solve_simplex_qp: need a non-empty square matrix, got shape {tuple(q.shape)}")
    m = q.shape[0]
    if q.device.type == "meta":
        return torch.full((m,), 1.0 / m, dtype=torch.float64, device=q.device)
    mat = q.detach().to(dtype=torch.float64, device="cpu").numpy()
    mat = 0.5 * (mat + mat.T)
    scale = float(np.max(np.abs(np.diag(mat)))) if m else 0.0
    if m == 1:
        return torch.ones(1, dtype=torch.float64)
    if scale <= 0.0:
        return torch.full((m,), 1.0 / m, dtype=torch.float64)
    mat = mat / scale + 1e-12 * np.eye(m)
    first = int(np.argmin(np.diag(mat)))
    a = np.zeros(m)
    a[first] = 1.0
    support = [first]
    for _ in range(50 * m + 100):
        p = _support_solution(mat, support)
        cur = a[support]
        if np.all(p > 0.0):
            a = np.zeros(m)
            a[support] = p
            g = 2.0 * mat @ a
            mult = g - float(a @ g)
            mult[support] = np.inf
            j = int(np.argmin(mult))
            if mult[j] >= -tol:
                break
            support.append(j)
            continue
        # step from the feasible point towards p until a coordinate reaches zero; drop it
        shrinking = p <= 0.0
        ratios = np.where(shrinking, cur / np.maximum(cur - p, 1e-300), np.inf)
        t = float(np.min(ratios))
        new = cur + t * (p - cur)
        new[int(np.argmin(ratios))] = 0.0
        keep = new > 0.0
        a = np.zeros(m)
        a[support] = np.where(keep, new, 0.0)
        support = [s for s, k in zip(support, keep) if k]
    else:  # pragma: no cover - the active-set method terminates in finitely many steps
        raise RuntimeError("solve_simplex_qp: the active-set method did not converge")
    a = np.clip(a, 0.0, None)
    return torch.from_numpy(a / a.sum())
