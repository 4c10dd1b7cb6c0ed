"""Codecs of :mod:`fedclock.algorithms.compression` and the compressed links of
:mod:`fedclock.algorithms.compressed`, against numbers computed by hand."""
from __future__ import annotations

import math
import pickle
from typing import Any, ClassVar

import pytest
import torch

from fedclock.algorithms.base import Algorithm, AlgorithmParams, Arrival, ClientData, ClientResult, ServerState, \
    Tensors, payload_nbytes
from fedclock.algorithms.compressed import RESIDUAL, DownloadConfig, UploadConfig, links_problem, with_links
from fedclock.algorithms.compression import Fp16, Quantize, TopK, pack_bits, unpack_bits
from fedclock.algorithms.fedasync import FedAsync
from fedclock.algorithms.fedavg import FedAvg, FedAvgParams
from fedclock.algorithms.models import ModelFactory
from fedclock.algorithms.scaffold import Scaffold


def gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


@pytest.mark.parametrize("codec, n, expected", [
    (Fp16(), 10, 20),                                      # 2 bytes a value
    (Quantize(bits=2, bucket_size=4), 10, 4 + 3 * 4),      # ceil(3 bits * 10 / 8) = 4, 3 bucket norms
    (Quantize(bits=4), 1000, 625 + 4),                     # ceil(5 * 1000 / 8) = 625, one norm
    (Quantize(bits=1, bucket_size=3), 7, 2 + 3 * 4),       # ceil(2 * 7 / 8) = 2, buckets 3+3+1
    (TopK(k=3), 10, 3 * 8),                                # float32 value + int32 position each
    (TopK(fraction=0.25), 10, 3 * 8),                      # k = ceil(2.5) = 3
])
def test_encoded_sizes_are_exact(codec: Any, n: int, expected: int) -> None:
    assert codec.encoded_bytes(n) == expected
    message = codec.encode(torch.randn(n, generator=gen()), gen(1))
    assert payload_nbytes(message) == expected  # what travels is what is charged


def test_bits_pack_and_unpack() -> None:
    codes = torch.tensor([0, 5, 7, 1, 2, 6, 3])  # 3-bit codes: 21 bits in 3 bytes
    packed = pack_bits(codes, 3)
    assert packed.dtype == torch.uint8 and packed.numel() == 3
    assert packed[0].item() == 0 | (5 << 3) | ((7 & 0b11) << 6)  # least significant bit first
    assert unpack_bits(packed, 3, 7).tolist() == codes.tolist()


def test_fp16_rounds_to_half() -> None:
    x = torch.tensor([1.0, 1.0 + 2 ** -12, 3.14159])
    out = Fp16().decode(Fp16().encode(x, gen()), 3)
    assert out.tolist() == [1.0, 1.0, float(torch.tensor(3.14159).half())]


def test_qsgd_on_levels_is_exact_and_between_levels_is_one_of_two() -> None:
    """[0, 5] with norm 5: |v|/||v|| * s is 0 and s, exactly on levels, so every draw decodes
    to v. [3, -4] with one bit (s = 1): value 0 decodes to 0 or 5 (0.6 vs 0.4), value 1 to 0
    or -5."""
    q = Quantize(bits=3)
    assert q.decode(q.encode(torch.tensor([0.0, 5.0]), gen()), 2).tolist() == [0.0, 5.0]
    one = Quantize(bits=1)
    seen = {tuple(one.decode(one.encode(torch.tensor([3.0, -4.0]), gen(s)), 2).tolist()) for s in range(50)}
    assert seen <= {(0.0, 0.0), (5.0, 0.0), (0.0, -5.0), (5.0, -5.0)} and len(seen) == 4


@pytest.mark.parametrize("codec", [Quantize(bits=2), Quantize(bits=2, bucket_size=4)], ids=["vector", "buckets"])
def test_qsgd_is_unbiased_with_bounded_variance(codec: Quantize) -> None:
    """Mean of 1500 draws within 5 standard errors of v per coordinate, and the mean squared
    error under Alistarh et al.'s Lemma 3.1 bound, min(d / s^2, sqrt(d) / s) ||v||^2 summed
    over buckets of d values."""
    v = torch.tensor([0.3, -1.2, 0.05, 2.0, -0.7, 0.0, 0.9, -0.1])
    g = gen(7)
    draws = torch.stack([codec.decode(codec.encode(v, g), 8) for _ in range(1500)])
    s = codec.levels
    d = codec.bucket_size or 8
    buckets = v.reshape(-1, d)
    bound = sum(min(d / s ** 2, math.sqrt(d) / s) * float(b.norm()) ** 2 for b in buckets)
    mse = float(((draws - v) ** 2).sum(dim=1).mean())
    assert mse <= bound
    stderr = draws.std(dim=0) / math.sqrt(len(draws))
    assert bool(((draws.mean(dim=0) - v).abs() <= 5 * stderr + 1e-6).all())


def test_top_k_keeps_the_k_largest_magnitudes_ties_to_the_lower_position() -> None:
    x = torch.tensor([0.1, -5.0, 3.0, 0.2, -4.0])
    message = TopK(k=2).encode(x, gen())
    assert message["index"].tolist() == [1, 4] and message["values"].tolist() == [-5.0, -4.0]
    assert TopK(k=2).decode(message, 5).tolist() == [0.0, -5.0, 0.0, 0.0, -4.0]
    assert TopK(k=2).encode(torch.tensor([1.0, -1.0, 1.0]), gen())["index"].tolist() == [0, 1]
    assert TopK(k=4).size_problem(3) == "k is 4 but the update has 3 values (allowed: 1..3)"


class FixedDelta(Algorithm[AlgorithmParams]):
    """A stand-in algorithm: uploads the delta the test queues and sums what arrives."""

    name: ClassVar[str] = "fixed_delta"
    Params: ClassVar[type[AlgorithmParams]] = AlgorithmParams
    modes: ClassVar[frozenset[str]] = frozenset({"sync"})
    upload_is_delta: ClassVar[bool] = True
    deltas: ClassVar[list[torch.Tensor]] = []

    def init_server(self, rng: torch.Generator) -> ServerState:
        return ServerState(tensors={"weights": torch.zeros(3)})

    def client_update(self, payload: Tensors, client_state: Tensors | None, data: ClientData,
                      rng: torch.Generator) -> ClientResult:
        assert client_state is None  # the residual never reaches the algorithm
        return ClientResult(upload={"delta": self.deltas.pop(0)}, state=None, num_samples=1)

    def server_receive(self, state: ServerState, arrivals: list[Arrival],
                       rng: torch.Generator) -> tuple[ServerState, bool]:
        total = sum((a.upload["delta"] for a in arrivals), torch.zeros(3))
        return state.evolve(tensors={"weights": state.tensors["weights"] + total}), True


def fixed(upload: Any) -> Any:
    alg = FixedDelta(AlgorithmParams(), ModelFactory("logistic", (2,), 1))  # 3 parameters
    return with_links(alg, UploadConfig(compression=upload), DownloadConfig())


DATA = ClientData(0, torch.zeros(1, 1), torch.zeros(1, dtype=torch.long), torch.zeros(0, 1),
                  torch.zeros(0, dtype=torch.long))


def test_error_feedback_keeps_what_was_not_sent() -> None:
    """top-1 with error feedback: task 1 delta [1, -3, 2] sends [0, -3, 0] and keeps [1, 0, 2];
    task 2 delta [0.5, 1, -0.5] + residual = [1.5, 1, 1.5]: a tie, the lower position is sent
    ([1.5, 0, 0]) and [0, 1, 1.5] is kept. The server decodes exactly what was sent."""
    alg = fixed(TopK(k=1))
    assert alg.stateless_clients is False and alg.upload_bytes() == 8
    FixedDelta.deltas[:] = [torch.tensor([1.0, -3.0, 2.0]), torch.tensor([0.5, 1.0, -0.5])]
    first = alg.client_update({}, None, DATA, gen())
    assert first.state[RESIDUAL].tolist() == [1.0, 0.0, 2.0]
    assert set(first.upload) == {"delta.index", "delta.values"}
    second = alg.client_update({}, first.state, DATA, gen())
    assert second.state[RESIDUAL].tolist() == [0.0, 1.0, 1.5]
    state = alg.init_server(gen())
    for result in (first, second):
        state, _ = alg.receive(state, [Arrival(0, result.upload, 1, 0, 0)], gen())
    assert state.tensors["weights"].tolist() == [1.5, -3.0, 0.0]


def test_without_error_feedback_nothing_is_kept() -> None:
    alg = fixed(TopK(k=1, error_feedback=False))
    FixedDelta.deltas[:] = [torch.tensor([1.0, -3.0, 2.0])]
    assert alg.client_update({}, None, DATA, gen()).state is None and alg.stateless_clients is False


def test_linked_algorithm_pickles_as_itself() -> None:
    alg = with_links(FedAvg(FedAvgParams(), ModelFactory("logistic", (4,), 1)),  # 5 parameters
                     UploadConfig(compression=Quantize(bits=2)), DownloadConfig(compression=Fp16()))
    back = pickle.loads(pickle.dumps(alg))
    assert type(back) is type(alg) and isinstance(back, FedAvg) and back.upload_codec == Quantize(bits=2)
    assert back.stateless_clients is True and back.upload_bytes() == 2 + 4 and back.download_bytes() == 5 * 2


def test_compression_is_refused_where_it_does_not_apply() -> None:
    up = UploadConfig(compression=Fp16())
    assert links_problem(Scaffold, up, DownloadConfig(), 1) == (
        "upload.compression: algorithm 'scaffold' uploads neither a model delta nor the model (allowed with "
        "algorithms that declare upload_is_delta or upload_is_model, e.g. fedavg, fedprox, fedsam, fednova, "
        "fedbuff, fedasync, fedavg_async, pfedme)")
    assert links_problem(FedAsync, up, DownloadConfig(), 1) is None
    assert links_problem(FedAvg, up, DownloadConfig(), 4) == (
        "upload.compression: clients run one at a time with compression (runtime.vectorize must be 1)")
    assert links_problem(FedAvg, up, DownloadConfig(), 1) is None


class FixedModel(Algorithm[AlgorithmParams]):
    """A stand-in algorithm that uploads its model: ``received + the step the test queues``;
    the server takes the mean of the models that arrive."""

    name: ClassVar[str] = "fixed_model"
    Params: ClassVar[type[AlgorithmParams]] = AlgorithmParams
    modes: ClassVar[frozenset[str]] = frozenset({"async"})
    upload_is_model: ClassVar[bool] = True
    steps: ClassVar[list[torch.Tensor]] = []

    def init_server(self, rng: torch.Generator) -> ServerState:
        return ServerState(tensors={"weights": torch.tensor([10.0, 20.0, 30.0])})

    def client_update(self, payload: Tensors, client_state: Tensors | None, data: ClientData,
                      rng: torch.Generator) -> ClientResult:
        return ClientResult(upload={"weights": payload["weights"] + self.steps.pop(0)}, state=None, num_samples=1)

    def server_receive(self, state: ServerState, arrivals: list[Arrival],
                       rng: torch.Generator) -> tuple[ServerState, bool]:
        mean = sum((a.upload["weights"] for a in arrivals), torch.zeros(3)) / len(arrivals)
        return state.evolve(tensors={"weights": mean}), True


def model_links(upload: Any, download: Any = None) -> Any:
    alg = FixedModel(AlgorithmParams(), ModelFactory("logistic", (2,), 1))  # 3 parameters
    return with_links(alg, UploadConfig(compression=upload), DownloadConfig(compression=download))


def test_a_model_upload_sends_its_difference_and_the_server_adds_it_back() -> None:
    """Received [10, 20, 30], trained to [11, 17, 32]: top-1 of the difference [1, -3, 2]
    sends [0, -3, 0] (8 bytes) and keeps [1, 0, 2]; the server decodes [10, 17, 30]. A top-1
    of the model itself would have sent only the 32. The received model rides along uncharged."""
    alg = model_links(TopK(k=1))
    assert alg.upload_bytes() == 8 and type(alg).upload_is_model and not type(alg).upload_is_delta
    FixedModel.steps[:] = [torch.tensor([1.0, -3.0, 2.0])]
    payload = alg.payload_for(alg.init_server(gen()), 0)
    result = alg.client_update(payload, None, DATA, gen())
    assert set(result.upload) == {"weights.index", "weights.values", "weights.received"}
    assert result.upload["weights.values"].tolist() == [-3.0] and result.state[RESIDUAL].tolist() == [1.0, 0.0, 2.0]
    state, _ = alg.receive(alg.init_server(gen()), [Arrival(0, result.upload, 1, 0, 0)], gen())
    assert state.tensors["weights"].tolist() == [10.0, 17.0, 30.0]


def test_a_model_upload_in_fp16_is_exact_in_size_and_near_in_value() -> None:
    """fp16: 2 bytes a parameter (6), the decoded model is the received one plus the
    difference rounded to half precision: [10, 20, 30] + [0.1, -0.2, 1/3] in fp16."""
    alg = model_links(Fp16())
    assert alg.upload_bytes() == 6
    step = torch.tensor([0.1, -0.2, 1 / 3])
    FixedModel.steps[:] = [step]
    result = alg.client_update(alg.payload_for(alg.init_server(gen()), 0), None, DATA, gen())
    state, _ = alg.receive(alg.init_server(gen()), [Arrival(0, result.upload, 1, 0, 0)], gen())
    expected = torch.tensor([10.0, 20.0, 30.0]) + step.half().float()
    assert state.tensors["weights"].tolist() == expected.tolist()


def test_a_model_upload_after_an_fp16_download_is_decoded_against_the_rounded_model() -> None:
    """With the model sent in fp16 the client starts from (and the server adds back to) the
    rounded model, so a lossless-in-range difference decodes to what the client trained."""
    alg = model_links(Fp16(), Fp16())
    FixedModel.steps[:] = [torch.tensor([0.5, -0.25, 1.0])]
    sent = alg.payload_for(ServerState(tensors={"weights": torch.tensor([10.01, 20.0, 30.0])}), 0)
    result = alg.client_update(sent, None, DATA, gen())
    rounded = torch.tensor([10.01, 20.0, 30.0]).half().float()
    assert result.upload["weights.received"].tolist() == rounded.tolist()
    state, _ = alg.receive(alg.init_server(gen()), [Arrival(0, result.upload, 1, 0, 0)], gen())
    assert state.tensors["weights"].tolist() == (rounded + torch.tensor([0.5, -0.25, 1.0])).tolist()
