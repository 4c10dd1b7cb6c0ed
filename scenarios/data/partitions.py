"""Splitting a training pool's sample indices among clients.

:func:`partition_indices` implements every label-based scheme of the scenario schema.
Each scheme first decides an owner client for every sample (``-1`` for samples nobody
uses) and then groups indices by owner, so every returned array is sorted, the arrays are
disjoint, and their dtype is int64. Only classes present in ``labels`` count as classes.
The ``natural`` partition is the dataset's own split and is handled by the federation.
Each setting (:mod:`fedclock.scenarios.data.partition_config`) calls its scheme's function here
from its ``owners``.

The schemes, and the paper each follows:

* ``iid``: a seeded shuffle split evenly (sizes differ by at most one).
* ``dirichlet``: Hsu, Qi, Brown, *Measuring the Effects of Non-Identical Data Distribution
  for Federated Visual Classification*, 2019 (arXiv:1909.06335), Sec. 3, the scheme
  FedMRUR (Sec. 5.1, its ref. [13]) and FedStyle ("all clients have the same amount of
  total images") use: client k draws class proportions ``q_k ~ Dir(alpha * p)``, ``p``
  the class prior of the pool, and takes ``n // N`` samples (the first ``n % N`` clients
  one more, so every sample is used) drawn without replacement with proportions ``q_k``.
  ``alpha`` is the total concentration: with a uniform prior over ``K`` classes each
  class's Dirichlet parameter is ``alpha / K`` (code bases that draw ``Dir(alpha * 1)``
  are ``K`` times less skewed at the same number; ``concentration: per_class`` is that
  reading: ``q_k ~ Dir(alpha, ..., alpha)``, alpha per class, the reading of FedStyle's
  He@alpha and of FedMRUR's Dir(mu)). Clients are filled in id order. **When a class
  runs out** the client's still-missing samples are drawn from ``q_k`` renormalized over the
  classes left (if ``q_k`` gives those no mass at all, in proportion to what remains of them); so the last clients
  also take what earlier clients left over. See :func:`dirichlet_owners`.
* ``dirichlet_by_class``: every class is split across the clients by shares drawn from
  ``Dir(alpha)`` over clients (the scheme of many FL code bases; client sizes vary with
  alpha), redrawn until every client holds ``min_samples``.
* ``shards``: McMahan et al., *Communication-Efficient Learning of Deep Networks from
  Decentralized Data*, AISTATS 2017, Sec. 3 ("pathological non-IID"): sort the pool by
  label (random order within a class), cut it into ``N * shards_per_client`` shards of
  equal size (``numpy.array_split``: sizes differ by at most one) and give every client
  ``shards_per_client`` shards at random.
* ``pathological``: classes dealt **round-robin** from one random class order, so every
  class has about the same number of holders and each class is split evenly among them;
  with 50 clients x 2 of 10 classes this gives only 5 distinct label sets. McMahan et
  al.'s scheme is ``shards``. ``label_sets: sliding`` gives client ``c`` the window of
  classes ``c, c+1, .., c+k-1`` (mod the number of classes ``C``) of the random order
  instead, the rule of FedReCo's code (``oyhah/FedReCo``, ``utils/utils_dataset.py``: client
  ``c`` holds classes ``(c + j) mod C``): every client holds exactly ``k`` classes, there
  are ``min(N, C)`` distinct label sets, and when ``C`` divides ``N`` every class has
  ``k N / C`` holders, so equal classes give equal clients (FMNIST pooled, 50 clients x 4:
  1,400 samples each, the paper's App. A.1). Shards instead leave many clients with fewer
  distinct classes than shards (two shards of one class).
* ``class_sampling``: the SPFL/PLGA paper (*Personalized Heterogeneous Federated Learning
  with Gradient Similarity*), App. B steps 1-3: every class ``D^k`` is cut at random into
  ``N`` equal parts ``D^k_1..D^k_N``; each client ``n`` draws ``classes_per_client``
  classes (independently for the non-IID data, one draw shared by all clients for the
  IID data, ``shared: true``) and takes its own part ``D^k_n`` of each. A client
  therefore holds ``|D^k| / N`` samples of each of its classes (the paper's Table 5:
  MNIST, 10 clients, 6 classes: 2,800 train / 700 test per client), clients have equal
  sizes when the classes do, and parts of classes a client did not draw go unused.
"""
from __future__ import annotations

from typing import Protocol, Sequence

import numpy as np

from fedclock.actors.federation import ClientIndex

_DIRICHLET_TRIES = 1000


class Partition(Protocol):
    """What :func:`partition_indices` needs of a partition setting
    (:class:`fedclock.scenarios.data.partition_config.PartitionModel`)."""

    def owners(self, labels: np.ndarray, num_clients: int, rng: np.random.Generator) -> np.ndarray:
        """Every sample's owner client (``-1``: unused)."""


def partition_indices(labels: np.ndarray, num_clients: int, cfg: Partition,
                      rng: np.random.Generator) -> Sequence[np.ndarray]:
    """Split ``range(len(labels))`` among ``num_clients`` clients following ``cfg``.

    Returns one sorted int64 index array per client; arrays are disjoint. Samples of
    classes no client holds (pathological, class sampling) are left out. Raises
    ``ValueError`` with a message that starts with the offending scenario field.
    """
    labels = np.asarray(labels)
    n = len(labels)
    if num_clients < 1:
        raise ValueError(f"population.num_clients: must be at least 1, got {num_clients}")
    if num_clients > n:
        raise ValueError(f"population.num_clients: {num_clients} clients but the training pool has only {n} "
                         "samples; use fewer clients or a larger dataset")
    return _group(cfg.owners(labels, num_clients, rng), num_clients)


def _group(owner: np.ndarray, num_clients: int) -> ClientIndex:
    """Indices grouped by owner (``-1`` dropped), each group ascending; one flat array and
    offsets, not an array per client (about 100 bytes each: 100 MB at a million clients)."""
    offsets = np.zeros(num_clients + 1, dtype=np.int64)
    if len(owner) and owner.min() >= 0:  # every sample owned: the same order without the copies of ``owner``
        np.cumsum(np.bincount(owner, minlength=num_clients), out=offsets[1:])
        return ClientIndex(np.argsort(owner, kind="stable").astype(np.int64, copy=False), offsets)
    used = np.flatnonzero(owner >= 0).astype(np.int64)
    order = used[np.argsort(owner[used], kind="stable")]
    np.cumsum(np.bincount(owner[used], minlength=num_clients), out=offsets[1:])
    return ClientIndex(order, offsets)


def even_owners(count: int, holders: np.ndarray) -> np.ndarray:
    """Owners for ``count`` shuffled samples split as evenly as possible among
    ``holders`` (the first ``count % len(holders)`` get one more)."""
    h = len(holders)
    sizes = count // h + (np.arange(h) < count % h)
    return np.repeat(holders, sizes)


def pool_classes(labels: np.ndarray, per_client: int, scheme: str) -> np.ndarray:
    classes = np.unique(labels)
    if per_client > len(classes):
        raise ValueError(f"dataset.partition.classes_per_client: {per_client} exceeds the {len(classes)} classes "
                         f"of the training pool ({scheme}; allowed: 1..{len(classes)})")
    return classes


def deal(labels: np.ndarray, held: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """``held[i]`` are client i's classes; each class's samples are split evenly among
    the clients holding it. Samples of classes nobody holds get owner ``-1``."""
    num_clients, k = held.shape
    owner = np.full(len(labels), -1, dtype=np.int64)
    flat_classes = held.ravel()
    flat_clients = np.repeat(np.arange(num_clients), k)
    order = np.argsort(flat_classes, kind="stable")
    flat_classes, flat_clients = flat_classes[order], flat_clients[order]
    for c in np.unique(flat_classes):
        lo, hi = np.searchsorted(flat_classes, c, "left"), np.searchsorted(flat_classes, c, "right")
        members = rng.permutation(np.flatnonzero(labels == c))
        owner[members] = even_owners(len(members), flat_clients[lo:hi])
    return owner


def sample_classes(classes: np.ndarray, num_clients: int, k: int, rng: np.random.Generator) -> np.ndarray:
    """Each client draws ``k`` distinct classes uniformly at random: (num_clients, k)."""
    rows = []
    chunk = max(1, (1 << 22) // len(classes))  # bound memory for very many clients
    for start in range(0, num_clients, chunk):
        keys = rng.random((min(chunk, num_clients - start), len(classes)))
        rows.append(np.argpartition(keys, k - 1, axis=1)[:, :k] if k < len(classes) else np.argsort(keys, axis=1))
    return classes[np.concatenate(rows)]


def dirichlet_by_class_owners(labels: np.ndarray, num_clients: int, alpha: float, min_samples: int,
                              rng: np.random.Generator) -> np.ndarray:
    """Per class, client shares ~ Dir(alpha); redraw until every client holds at least
    ``min_samples``."""
    n = len(labels)
    need = num_clients * min_samples
    if need > n:
        raise ValueError(f"dataset.partition.min_samples: {num_clients} clients x {min_samples} samples need "
                         f"{need} training samples but the pool has {n}; lower min_samples or use fewer clients")
    members = [rng.permutation(np.flatnonzero(labels == c)) for c in np.unique(labels)]
    for _ in range(_DIRICHLET_TRIES):
        counts = np.empty((len(members), num_clients), dtype=np.int64)
        for row, idx in enumerate(members):
            share = rng.dirichlet(np.full(num_clients, alpha))
            cuts = (np.cumsum(share) * len(idx)).astype(np.int64)[:-1]
            counts[row] = np.diff(np.concatenate([[0], np.minimum(cuts, len(idx)), [len(idx)]]))
        if counts.sum(axis=0).min() >= min_samples:
            owner = np.empty(n, dtype=np.int64)
            for row, idx in enumerate(members):
                owner[idx] = np.repeat(np.arange(num_clients), counts[row])
            return owner
    raise ValueError(f"dataset.partition.alpha: Dirichlet(alpha={alpha}) left some client with fewer than "
                     f"min_samples={min_samples} samples in {_DIRICHLET_TRIES} draws; raise alpha, lower "
                     "min_samples or use fewer clients")


def dirichlet_owners(labels: np.ndarray, num_clients: int, alpha: float, rng: np.random.Generator,
                     per_class: bool = False) -> np.ndarray:
    """Hsu et al. 2019: client k draws ``q_k ~ Dir(alpha * p)`` (``per_class``:
    ``Dir(alpha * 1)``) and takes its equal share of samples without replacement with
    proportions ``q_k``; a class that runs out drops out of the proportions (module docstring)."""
    n = len(labels)
    classes, counts = np.unique(labels, return_counts=True)
    members = [rng.permutation(np.flatnonzero(labels == c)) for c in classes]
    prior = np.ones(len(classes)) if per_class else counts / n
    remaining = counts.astype(np.int64)
    sizes = n // num_clients + (np.arange(num_clients) < n % num_clients)
    owner = np.empty(n, dtype=np.int64)
    for k in range(num_clients):
        q = rng.dirichlet(alpha * prior)
        take = _draw_without_replacement(q, int(sizes[k]), remaining, rng)
        for j in np.flatnonzero(take):
            used = counts[j] - remaining[j]
            owner[members[j][used: used + take[j]]] = k
        remaining -= take
    return owner


def _draw_without_replacement(q: np.ndarray, size: int, remaining: np.ndarray,
                              rng: np.random.Generator) -> np.ndarray:
    """Per-class counts summing to ``size``, none above ``remaining``: a multinomial of the
    still-missing count over the classes left with weights ``q`` renormalized over them
    (in proportion to what remains of them where ``q`` gives them no mass), capped at what
    is left, repeated until ``size`` is reached. Needs ``remaining.sum() >= size``."""
    q = np.where(np.isfinite(q), q, 0.0)
    take = np.zeros_like(remaining)
    need = size
    while need > 0:
        room = remaining - take
        weight = np.where(room > 0, q, 0.0)
        if not weight.sum() > 0:
            weight = room.astype(np.float64)
        draw = np.minimum(rng.multinomial(need, weight / weight.sum()), room)
        take += draw
        need -= int(draw.sum())
    return take


def shard_owners(labels: np.ndarray, num_clients: int, per_client: int, rng: np.random.Generator) -> np.ndarray:
    """McMahan et al. 2017: label-sorted shards of equal size, ``per_client`` each at random."""
    n = len(labels)
    count = num_clients * per_client
    if count > n:
        raise ValueError(f"dataset.partition.shards_per_client: {num_clients} clients x {per_client} shards need "
                         f"{count} shards but the pool has only {n} samples; lower shards_per_client or use fewer "
                         "clients")
    shuffled = rng.permutation(n)
    by_label = shuffled[np.argsort(labels[shuffled], kind="stable")]
    shard_of_client = rng.permutation(count) // per_client  # shard s goes to client shard_of_client[s]
    owner = np.empty(n, dtype=np.int64)
    shard_sizes = n // count + (np.arange(count) < n % count)
    owner[by_label] = np.repeat(shard_of_client, shard_sizes)
    return owner


def class_parts(labels: np.ndarray, held: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """SPFL/PLGA App. B: every class cut at random into ``N`` equal parts (sizes differ by
    at most one); client ``n`` owns part ``n`` of each class in ``held[n]``."""
    num_clients = held.shape[0]
    owner = np.full(len(labels), -1, dtype=np.int64)
    holds = np.zeros((num_clients, int(held.max()) + 1), dtype=bool)
    holds[np.repeat(np.arange(num_clients), held.shape[1]), held.ravel()] = True
    for c in np.unique(held):
        members = rng.permutation(np.flatnonzero(labels == c))
        part_of = even_owners(len(members), rng.permutation(num_clients))  # who gets the +1s is random
        mine = holds[part_of, c]
        owner[members[mine]] = part_of[mine]
    return owner
