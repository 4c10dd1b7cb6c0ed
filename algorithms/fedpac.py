"""FedPAC (Xu, Tong, Huang, ICLR 2023): feature alignment to global class centroids and
classifier collaboration by a quadratic program over feature statistics."""
from __future__ import annotations

from typing import ClassVar

import torch
import torch.nn.functional as F
from pydantic import Field
from torch import nn

from fedclock.algorithms.base import Algorithm, AlgorithmParams, Arrival, ClientData, ClientResult, EvalResult, \
    ServerState, Tensors, epoch_steps, evaluate_flat
from fedclock.algorithms.features import body_and_head_upload, class_feature_stats, feature_dim, \
    join_parts, mean_body_and_head
from fedclock.algorithms.models import ModelFactory
from fedclock.algorithms.simplex_qp import qp_flops, solve_simplex_qp
from fedclock.algorithms.training import local_sgd


class FedPACParams(AlgorithmParams):
    """FedPAC hyper-parameters. ``local_epochs`` / ``local_steps`` count the body steps."""

    lam: float = Field(default=1.0, ge=0, description="weight lambda of the feature alignment term")
    head_epochs: float = Field(default=1.0, gt=0, description="local epochs on the head (body frozen) "
                               "before the body steps")
    head_lr: float | None = Field(default=None, gt=0, description="learning rate of the head steps "
                                  "(default: lr)")
    collaborate_heads: bool = Field(default=True, description="build each client's head as the QP-weighted "
                                    "combination of the cohort's heads (False: the paper's ablation "
                                    "with feature alignment only)")
    weight_floor: float = Field(default=1e-3, ge=0, lt=1, description="combination weights below this are set "
                                "to zero and the rest renormalized")


def alignment_loss(features: torch.Tensor, labels: torch.Tensor, centroids: torch.Tensor,
                   known: torch.Tensor) -> torch.Tensor:
    """``(1/B) sum_b known[y_b] * (1/d) ||f_b - c_{y_b}||^2``: the batch mean of the
    per-sample squared distance to the sample's class centroid divided by the feature width
    ``d`` (PyTorch's ``MSELoss`` over the batch), counting zero for classes without a centroid
    (``known[k] = 0``)."""
    diff = features - centroids[labels]
    per_sample = (diff * diff).mean(dim=1) * known[labels]
    return per_sample.mean()


def combination_matrix(h_stats: torch.Tensor, v_stats: torch.Tensor, i: int) -> torch.Tensor:
    """The QP matrix of client ``i`` (row ``i`` of the cohort): ``diag(V) + G`` with
    ``G[j, l] = <vec(H_i - H_j), vec(H_i - H_l)>``.

    ``h_stats`` is ``(m, C, d)``: per client j, ``H_j[k] = p_j(k) * mu_j(k)`` (class prior times
    class feature mean); ``v_stats`` is ``(m,)``: ``V_j`` (the variance term)."""
    m = h_stats.shape[0]
    u = (h_stats[i].unsqueeze(0) - h_stats).reshape(m, -1).to(torch.float64)
    return torch.diag(v_stats.to(torch.float64)) + u @ u.T


def combination_weights(h_stats: torch.Tensor, v_stats: torch.Tensor, i: int, floor: float) -> torch.Tensor:
    """Client ``i``'s head-combination weights: the simplex QP minimizer of
    :func:`combination_matrix`, with weights below ``floor`` zeroed and the rest renormalized."""
    a = solve_simplex_qp(combination_matrix(h_stats, v_stats, i))
    kept = torch.where(a >= floor, a, torch.zeros_like(a))
    return kept / kept.sum() if float(kept.sum()) > 0 else a


class FedPAC(Algorithm[FedPACParams]):
    """FedPAC: Personalized Federated Learning with Feature Alignment and Classifier
    Collaboration.

    Xu, Tong, Huang, ICLR 2023. Facts and formulas checked against the paper and the
    authors' public code (JianXu95/FedPAC); no code copied.

    Client task (payload: global body ``u``, the client's head, global centroids ``c_k`` with
    their counts):

    1. *Statistics for the classifier collaboration*, with the received body before training,
       over the train split (n samples, class counts n_k, class prior p_k = n_k / n, class
       feature means mu_k): ``H[k] = p_k mu_k`` (a ``C x d`` matrix, zero rows for absent
       classes) and ``V = (mean_x ||f(x)||^2 - ||H||_F^2) / n`` (the trace of the covariance
       of ``f(x) e_y^T`` over n samples, the variance term of the paper's estimate).
    2. ``head_epochs`` of SGD on the head alone (body frozen), cross-entropy, ``head_lr``.
    3. ``local_epochs`` (or ``local_steps``) of SGD on the body alone (head frozen):
       ``CE + lam * alignment``, the alignment being :func:`alignment_loss` against the
       global centroid of each sample's class. **Choice**: the squared distance is averaged
       over the feature width as well as the batch (``MSELoss``, the authors' code, with which
       lambda = 1 was tuned); classes without a global centroid (the first round, or a class
       no cohort has held yet) add nothing.
    4. Per-class feature means and counts with the trained body (the local centroids).
    Upload: the body delta, the trained head, ``means``/``counts``, ``H`` and ``V``. The
    client keeps its trained head as persistent state.

    Server, on a cohort: body ``u <- u + sum_j (n_j / n) Delta_j``; centroids
    ``c_k = sum_j n_jk mu_jk / sum_j n_jk`` for every class some member holds (other classes
    keep their previous centroid); for each member i, combination weights ``alpha_i`` =
    argmin over the simplex of ``sum_j alpha_ij^2 V_j + ||sum_j alpha_ij (H_i - H_j)||_F^2``
    (the paper's QP, ``alpha^T (diag(V) + G_i) alpha``), solved by
    :func:`~fedclock.algorithms.simplex_qp.solve_simplex_qp` (projected accelerated gradient,
    exact up to its tolerance; the authors use cvxpy). Weights below ``weight_floor`` (1e-3, as
    in the authors' code) are zeroed and the rest renormalized; client i's head becomes
    ``sum_j alpha_ij v_j`` over the cohort's trained heads. The matrix is positive
    semi-definite by construction, so the QP always has a solution.

    Payload (per client, ``payload_is_shared = False``): the body, the centroids and their
    counts, and a head with a flag ``personal``: the server-built combination for this client
    (flag 1; it replaces the client's own head, as in the authors' code) or, for a client with
    no combination yet, the global head (flag 0; a client with a head of its own keeps it).
    The personalized model of a client is the current body with that head.

    **Choices**: stale arrivals (``late_results: include``) join the cohort they arrive in
    like punctual ones. The global model (for global accuracy only) is the body with the
    sample-weighted mean of the cohort's trained heads; clients never train from it except
    as their first head. The statistics passes (steps 1 and 4) are charged as forward-only
    passes (1/3 of a training pass per sample). ``collaborate_heads: false`` gives the
    paper's ablation without classifier collaboration (each client keeps its own head).
    """

    name: ClassVar[str] = "fedpac"
    per_token_refusal: ClassVar[str] = ("its feature alignment pulls each sample to its class's centroid, and its "
                                        "classifier weights come from class counts and per-class feature means "
                                        "(Xu et al., ICLR 2023): one label per sample")
    partial_work: ClassVar[bool] = False  # head phase + body phase: a step count does not describe it
    summary: ClassVar[str] = "feature alignment to global class centroids + QP-weighted classifier combination"
    paper: ClassVar[str] = ("Xu, Tong, Huang, Personalized Federated Learning with Feature Alignment and "
                            "Classifier Collaboration, ICLR 2023")
    Params: ClassVar[type[AlgorithmParams]] = FedPACParams
    modes: ClassVar[frozenset[str]] = frozenset({"sync"})
    payload_is_shared: ClassVar[bool] = False

    def __init__(self, params: FedPACParams, model_factory: ModelFactory) -> None:
        super().__init__(params, model_factory)
        self.num_classes = model_factory.num_classes
        self.dim = feature_dim(model_factory)

    # ------------------------------------------------------------------ sizes and costs
    def _body_size(self) -> int:
        s = self.model_factory.body
        return s.stop - s.start

    def _head_size(self) -> int:
        s = self.model_factory.head
        return s.stop - s.start

    def download_bytes(self) -> int:
        c, d = self.num_classes, self.dim
        return 4 * (self._body_size() + self._head_size() + c * d + c + 1)

    def upload_bytes(self) -> int:
        c, d = self.num_classes, self.dim
        return 4 * (self._body_size() + self._head_size() + 2 * c * d + c + 1)

    def _head_steps(self, n: int) -> int:
        return epoch_steps(n, self.params.batch_size, self.params.head_epochs)

    # ------------------------------------------------------------------ hooks
    def init_server(self, rng: torch.Generator) -> ServerState:
        c, d = self.num_classes, self.dim
        return ServerState(tensors={"weights": self.model_factory.initial_weights(rng),
                                    "centroids": torch.zeros(c, d), "centroid_counts": torch.zeros(c)})

    def payload_for(self, state: ServerState, client: int) -> Tensors:
        weights = state.tensors["weights"]
        personal = state.tensors.get(f"head/{client}")
        head = personal if personal is not None else weights[self.model_factory.head]
        return {"body": weights[self.model_factory.body], "head": head,
                "personal": torch.tensor([1.0 if personal is not None else 0.0]),
                "centroids": state.tensors["centroids"], "centroid_counts": state.tensors["centroid_counts"]}

    @staticmethod
    def start_head(payload: Tensors, client_state: Tensors | None) -> torch.Tensor:
        """The head a client trains and is evaluated with: the server-built combination if the
        payload carries one, else the client's own head, else the payload's global head."""
        if float(payload["personal"][0]) > 0 or client_state is None:
            return payload["head"]
        return client_state["head"]

    def feature_statistics(self, data: ClientData) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(counts ``(C,)``, class feature means ``(C, d)``, sums of squared norms ``(C,)``)
        of the workspace's current body on the train split (float64)."""
        model = self.workspace
        was_training = model.training
        model.eval()
        try:
            counts, sums, sq = class_feature_stats(model.features, data.x_train, data.y_train, self.num_classes)
        finally:
            model.train(was_training)
        means = sums / counts.clamp(min=1).unsqueeze(1)
        return counts, means, sq

    def collaboration_statistics(self, data: ClientData) -> tuple[torch.Tensor, torch.Tensor]:
        """``H`` ``(C, d)`` and ``V`` ``(1,)`` of the workspace's current body (step 1)."""
        counts, means, sq = self.feature_statistics(data)
        n = max(float(counts.sum()), 1.0)
        h = (counts / n).unsqueeze(1) * means
        v = (float(sq.sum()) / n - float((h * h).sum())) / n
        return h, torch.tensor([max(v, 0.0)], dtype=torch.float64)

    def client_update(self, payload: Tensors, client_state: Tensors | None, data: ClientData,
                      rng: torch.Generator) -> ClientResult:
        p, factory, model = self.params, self.model_factory, self.workspace
        body0 = payload["body"]
        start = join_parts(factory, body0, self.start_head(payload, client_state))
        factory.load_flat(model, start)
        h_stats, v_stat = self.collaboration_statistics(data)

        n = data.num_train
        head_params = p.model_copy(update={"lr": p.head_lr}) if p.head_lr is not None else p
        after_head, m_head = local_sgd(model, factory, start, data, head_params, rng, self._head_steps(n),
                                       trainable=list(model.head.parameters()))
        device = data.x_train.device
        centroids = payload["centroids"].to(device=device, dtype=torch.float32)
        known = (payload["centroid_counts"] > 0).to(device=device, dtype=torch.float32)
        lam = p.lam

        def loss_fn(m: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
            feats = m.features(x)  # type: ignore[operator]
            loss = F.cross_entropy(m.head(feats), y)  # type: ignore[operator]
            if lam > 0:
                loss = loss + lam * alignment_loss(feats, y, centroids, known)
            return loss

        local, m_body = local_sgd(model, factory, after_head, data, p, rng, self.local_steps(n), loss_fn=loss_fn,
                                  trainable=list(model.body.parameters()))
        counts, means, _ = self.feature_statistics(data)
        upload = {**body_and_head_upload(factory, local, body0), "means": means.to(torch.float32),
                  "counts": counts.to(torch.float32), "h_stats": h_stats.to(torch.float32),
                  "v_stat": v_stat.to(torch.float32)}
        metrics = {"head_loss": m_head["train_loss"], "train_loss": m_body["train_loss"],
                   "steps": m_head["steps"] + m_body["steps"]}
        return ClientResult(upload=upload, state={"head": upload["head"]}, num_samples=n, metrics=metrics)

    def server_formula_flops(self, arrivals: int) -> int:
        """One simplex QP of the cohort's size per member (:func:`~fedclock.algorithms.simplex_qp.qp_flops`)."""
        return arrivals * qp_flops(arrivals) if self.params.collaborate_heads else 0

    def server_receive(self, state: ServerState, arrivals: list[Arrival],
                       rng: torch.Generator) -> tuple[ServerState, bool]:
        if not arrivals:
            return state, False
        tensors = dict(state.tensors)
        tensors["weights"] = mean_body_and_head(self.model_factory, state.tensors["weights"], arrivals)

        counts = torch.stack([a.upload["counts"].to(torch.float64) for a in arrivals])  # (m, C)
        means = torch.stack([a.upload["means"].to(torch.float64) for a in arrivals])  # (m, C, d)
        class_total = counts.sum(0)
        pooled = (counts.unsqueeze(2) * means).sum(0) / class_total.clamp(min=1).unsqueeze(1)
        seen = class_total > 0
        centroids = state.tensors["centroids"].clone()
        centroid_counts = state.tensors["centroid_counts"].clone()
        centroids[seen] = pooled[seen].to(centroids.dtype)
        centroid_counts[seen] = class_total[seen].to(centroid_counts.dtype)
        tensors["centroids"], tensors["centroid_counts"] = centroids, centroid_counts

        if self.params.collaborate_heads:
            h_stats = torch.stack([a.upload["h_stats"] for a in arrivals])
            v_stats = torch.cat([a.upload["v_stat"].reshape(1) for a in arrivals])
            heads = torch.stack([a.upload["head"].to(torch.float64) for a in arrivals])
            for i, a in enumerate(arrivals):
                alpha = combination_weights(h_stats, v_stats, i, self.params.weight_floor)
                tensors[f"head/{a.client}"] = (alpha @ heads).to(torch.float32)
        return state.evolve(tensors=tensors, extra=dict(state.extra)), True

    def evaluate_client(self, payload: Tensors, client_state: Tensors | None, data: ClientData,
                        batch_size: int) -> EvalResult:
        weights = join_parts(self.model_factory, payload["body"], self.start_head(payload, client_state))
        return evaluate_flat(self.workspace, self.model_factory, weights, data.x_test, data.y_test, batch_size)
