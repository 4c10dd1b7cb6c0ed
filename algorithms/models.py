"""Models with a body (feature extractor) / head (classifier) split and named stages.

Every model is an ``nn.Module`` with two children, ``body`` and ``head``, so personalized
algorithms can send or keep either part, and a ``stages`` mapping from a stage name to the
child modules of the body/head it groups (SPFL computes similarities per stage).

Weights travel as one flat float32 vector (the parameters in ``named_parameters`` order);
:class:`ModelFactory` builds models and knows where each part sits in that vector.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Callable, Sequence

import torch
from torch import nn

from fedclock.algorithms.fed_model import FedModel


class MLP(FedModel):
    """Flatten, hidden ReLU layers (the body), linear head."""

    def __init__(self, input_shape: Sequence[int], num_classes: int, hidden: Sequence[int] = (128,)) -> None:
        in_features = 1
        for d in input_shape:
            in_features *= int(d)
        layers: list[nn.Module] = [nn.Flatten()]
        width = in_features
        for h in hidden:
            layers += [nn.Linear(width, h), nn.ReLU()]
            width = h
        super().__init__(nn.Sequential(*layers), nn.Linear(width, num_classes),
                         {"hidden": ("body.",), "head": ("head.",)})


class Logistic(FedModel):
    """Multinomial logistic regression (the FedProx Synthetic task's model): identity body."""

    def __init__(self, input_shape: Sequence[int], num_classes: int) -> None:
        in_features = 1
        for d in input_shape:
            in_features *= int(d)
        super().__init__(nn.Flatten(), nn.Linear(in_features, num_classes), {"head": ("head.",)})


def _conv_out(side: int, pools: int) -> int:
    for _ in range(pools):
        side //= 2
    return side


def _valid_side(side: int) -> int:
    """Side after two blocks of unpadded 5x5 convolution + 2x2 max-pool (0: does not fit)."""
    for _ in range(2):
        side = (side - 4) // 2
        if side < 1:
            return 0
    return side


def conv_pool_body(input_shape: Sequence[int], channels: tuple[int, int], widths: Sequence[int],
                   padding: int = 2) -> nn.Sequential:
    """The body of the classic two-convolution CNNs: two blocks of 5x5 convolution + ReLU +
    2x2 max-pool with ``channels`` output channels, flatten, then one FC + ReLU layer per entry
    of ``widths``. ``padding`` is 2 (same-size convolutions, so small inputs such as 8x8
    digits fit) or 0 (valid convolutions; the input needs sides of at least 16). Layers are
    created in that order (the seeded initialization depends on it); the convolutions are
    ``body.0`` and ``body.3``, the FC layers ``body.7``, ``body.9``, ..."""
    in_channels, height, width = (int(d) for d in input_shape)
    if padding == 0 and (_valid_side(height) < 1 or _valid_side(width) < 1):
        raise ValueError(f"model.name: spfl_cnn (no padding) needs images of at least 16x16, got {height}x{width} "
                         f"(use spfl_cnn_padded for smaller ones)")
    layers: list[nn.Module] = [
        nn.Conv2d(in_channels, channels[0], 5, padding=padding), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(channels[0], channels[1], 5, padding=padding), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(),
    ]
    if padding == 0:
        size = channels[1] * _valid_side(height) * _valid_side(width)
    else:
        size = channels[1] * _conv_out(height, 2) * _conv_out(width, 2)
    for w in widths:
        layers += [nn.Linear(size, w), nn.ReLU()]
        size = w
    return nn.Sequential(*layers)


class CNN5(FedModel):
    """The 5-layer CNN of the FedReCo paper: conv 5x5 (32) + 2x2 max-pool, conv 5x5 (64) +
    2x2 max-pool, FC 1024, FC 1024 (the body: the first four layers), linear head.
    Convolutions use padding 2 so the network also fits small inputs (8x8 digits)."""

    def __init__(self, input_shape: Sequence[int], num_classes: int) -> None:
        super().__init__(conv_pool_body(input_shape, (32, 64), (1024, 1024)), nn.Linear(1024, num_classes),
                         {"conv": ("body.0.", "body.3."), "fc": ("body.7.", "body.9.", "head.")})


SPFL_STAGES: dict[str, tuple[str, ...]] = {"base": ("body.0.", "body.3.", "body.7."), "head": ("head.",)}
"""The SPFL/PLGA paper's S = 2 stages. The paper does not name the layers of each stage; the
authors' code (github.com/MondayCat/PLGA, SPFL/aggregation_utils/aggregation_v4_1_1.py) keeps
one similarity matrix for ``fc2`` (the classifier, our ``head``) and one for conv1, conv2 and
fc1 (our ``base``)."""


class SPFLCNN(FedModel):
    """The CNN of the SPFL/PLGA paper (App. C, Table 4): conv 5x5x20, max-pool 2, conv 5x5x50,
    max-pool 2, FC 512, FC classes, with unpadded (valid) convolutions as in the authors' code
    (github.com/MondayCat/PLGA, SPFL/model/cnn_model.py; that code's FC layer has 500 units, we keep
    the paper's 512): 0.44M parameters on 28x28 MNIST
    (model size sets the clock's transfer times). Needs inputs of at least 16x16. Stages:
    :data:`SPFL_STAGES` (``base``: both convolutions and FC 512; ``head``: the classifier)."""

    padding: int = 0

    def __init__(self, input_shape: Sequence[int], num_classes: int) -> None:
        super().__init__(conv_pool_body(input_shape, (20, 50), (512,), padding=self.padding),
                         nn.Linear(512, num_classes), dict(SPFL_STAGES))


class SPFLCNNPadded(SPFLCNN):
    """:class:`SPFLCNN` with padding-2 convolutions, so 8x8 inputs (scikit-learn digits) fit:
    what the quick SPFL/PLGA files and the small tests use (1.29M parameters on 28x28)."""

    padding: int = 2


class LeafCNN(FedModel):
    """LEAF's FEMNIST CNN (Caldas et al., "LEAF: A Benchmark for Federated Settings", 2018,
    Sec. 4 and its reference model ``models/femnist/cnn.py``): conv 5x5 (32, same padding) +
    ReLU + 2x2 max-pool, conv 5x5 (64) + ReLU + 2x2 max-pool, dense 2048 + ReLU (the body),
    linear head. On 28x28 FEMNIST with 62 classes: 6,603,710 parameters. Stages ``conv``
    and ``fc`` (the dense layer and the head)."""

    def __init__(self, input_shape: Sequence[int], num_classes: int) -> None:
        super().__init__(conv_pool_body(input_shape, (32, 64), (2048,)), nn.Linear(2048, num_classes),
                         {"conv": ("body.0.", "body.3."), "fc": ("body.7.", "head.")})


class PflCNN(FedModel):
    """pfl-research's ``simple_cnn`` (the CIFAR-10 model of its benchmark suite, whose
    configuration ``benchmarks/pfl_cifar10.py`` and ``scenarios/library/benchmarks/pfl_cifar10.yaml``
    follow): conv 3x3 (32, no padding) + ReLU, conv 3x3 (64, no padding) + ReLU, 2x2
    max-pool, dropout 0.25, flatten, dense 128 + ReLU, dropout 0.5 (the body), linear head.
    Weights of the convolutions and dense layers are Glorot (Xavier) uniform, biases keep
    PyTorch's default. Inputs are channels-first ``(C, H, W)`` of at least 6x6. On 3x32x32
    CIFAR-10 with 10 classes: 1,626,442 parameters. Stages ``conv`` and ``fc``. Its dropout
    masks are drawn per task from the task's seed
    (:func:`fedclock.algorithms.training.local_sgd`), and vectorized clients draw the same
    ones (:mod:`fedclock.algorithms.vectorized`, "Dropout")."""

    def __init__(self, input_shape: Sequence[int], num_classes: int) -> None:
        in_channels, height, width = (int(d) for d in input_shape)
        side_h, side_w = (height - 4) // 2, (width - 4) // 2
        if side_h < 1 or side_w < 1:
            raise ValueError(f"model.name: pfl_cnn needs images of at least 6x6, got {height}x{width}")
        body = nn.Sequential(
            nn.Conv2d(in_channels, 32, 3), nn.ReLU(), nn.Conv2d(32, 64, 3), nn.ReLU(), nn.MaxPool2d(2),
            nn.Dropout(0.25), nn.Flatten(), nn.Linear(64 * side_h * side_w, 128), nn.ReLU(), nn.Dropout(0.5))
        head = nn.Linear(128, num_classes)
        for m in (*body, head):
            if isinstance(m, (nn.Conv2d, nn.Linear)):
                nn.init.xavier_uniform_(m.weight)
        super().__init__(body, head, {"conv": ("body.0.", "body.2."), "fc": ("body.7.", "head.")})


class CharLSTMBody(nn.Module):
    """Embedding then a stacked LSTM; the feature is the last time step's output. Inputs are
    character indices (stored as floats, like every input of a federation; cast here)."""

    def __init__(self, vocab: int, embedding: int, hidden: int, layers: int) -> None:
        super().__init__()
        self.embedding = nn.Embedding(vocab, embedding)
        self.lstm = nn.LSTM(embedding, hidden, num_layers=layers, batch_first=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out, _ = self.lstm(self.embedding(x.long()))
        return out[:, -1, :]


class CharLSTM(FedModel):
    """LEAF's Shakespeare character model (Caldas et al. 2018, Sec. 4; reference model
    ``models/shakespeare/stacked_lstm.py``; the same network as McMahan et al., AISTATS 2017,
    Sec. 3): embedding of 8 per character, two LSTM layers of 256 units, the last step's
    output (the body), a linear head over the characters (``num_classes``, 80 with LEAF's
    vocabulary). Input: a sequence of character indices, shape ``(N, L)``. Stages ``embed``
    (embedding + LSTM) and ``head``. Not vectorized (no batched LSTM kernel)."""

    def __init__(self, input_shape: Sequence[int], num_classes: int) -> None:
        if len(input_shape) != 1:
            raise ValueError(f"model.name: char_lstm reads sequences of character indices (input shape (L,)), got "
                             f"inputs of shape {tuple(input_shape)}; use it with a text dataset such as shakespeare")
        super().__init__(CharLSTMBody(num_classes, 8, 256, 2), nn.Linear(256, num_classes),
                         {"embed": ("body.",), "head": ("head.",)})


class WordLSTMBody(nn.Module):
    """Embedding, one LSTM layer over the whole sequence, and a linear projection of every
    step's output: one feature vector per token, shape ``(N, T, projection)``. Inputs are word
    indices (stored as floats, like every input of a federation; cast here)."""

    def __init__(self, vocab: int, embedding: int, hidden: int, projection: int) -> None:
        super().__init__()
        self.embedding = nn.Embedding(vocab, embedding)
        self.lstm = nn.LSTM(embedding, hidden, batch_first=True)
        self.projection = nn.Linear(hidden, projection)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out, _ = self.lstm(self.embedding(x.long()))
        return self.projection(out)


class WordLSTM(FedModel):
    """The Stack Overflow next-word model of Reddi et al., "Adaptive Federated Optimization",
    ICLR 2021, App. C (TFF's ``stackoverflow`` word-prediction model): word embedding of 96,
    one LSTM layer of 670 units, a dense layer of 96 (the body, applied at every position),
    and a dense layer over the vocabulary (the head), so the logits are ``(N, T, classes)``:
    one next-word prediction per input position (per-token targets,
    :mod:`fedclock.algorithms.targets`). ``classes`` is the extended vocabulary (with
    TFF's 10,000 words: 10,004 with padding, out-of-vocabulary, beginning and end of
    sentence), which the embedding also reads. With 10,004 classes: 4,053,428 parameters
    (TFF's Keras model has 4,050,748: its LSTM has one bias vector, PyTorch's two).
    The dense layers have no activation (TFF's model has none). Input: word indices, shape
    ``(N, T)``. Stages ``body`` and ``head``. Not vectorized (no batched LSTM kernel)."""

    sizes: tuple[int, int, int] = (96, 670, 96)
    """Embedding, LSTM units, projection."""

    def __init__(self, input_shape: Sequence[int], num_classes: int) -> None:
        if len(input_shape) != 1:
            raise ValueError(f"model.name: word_lstm reads sequences of word indices (input shape (T,)), got inputs of "
                             f"shape {tuple(input_shape)}; use it with a next-word dataset such as stackoverflow")
        embedding, hidden, projection = self.sizes
        super().__init__(WordLSTMBody(num_classes, embedding, hidden, projection), nn.Linear(projection, num_classes),
                         {"body": ("body.",), "head": ("head.",)})


class WordLSTMSmall(WordLSTM):
    """:class:`WordLSTM` with embedding 16, 64 LSTM units and a projection of 16: the quick
    Stack Overflow file's model (a few seconds per round on a CPU core), not the paper's."""

    sizes = (16, 64, 16)


def _resnet18_gn(input_shape: Sequence[int], num_classes: int) -> FedModel:
    from fedclock.algorithms.resnet import ResNet18GN  # imported when used: resnet imports this module

    return ResNet18GN(input_shape, num_classes)


def _conv_gn(input_shape: Sequence[int], num_classes: int) -> FedModel:
    from fedclock.algorithms.encoders import ConvGN  # imported when used: encoders imports this module

    return ConvGN(input_shape, num_classes)


ModelBuilder = Callable[[tuple[int, ...], int], nn.Module]
"""A user's model: ``(input_shape, num_classes) -> nn.Module`` (see :func:`as_fed_model`)."""

BUILTIN_MODELS: dict[str, Callable[[tuple[int, ...], int, tuple[int, ...]], FedModel]] = {
    "mlp": lambda shape, classes, hidden: MLP(shape, classes, hidden),
    "logistic": lambda shape, classes, hidden: Logistic(shape, classes),
    "cnn5": lambda shape, classes, hidden: CNN5(shape, classes),
    "spfl_cnn": lambda shape, classes, hidden: SPFLCNN(shape, classes),
    "spfl_cnn_padded": lambda shape, classes, hidden: SPFLCNNPadded(shape, classes),
    "resnet18_gn": lambda shape, classes, hidden: _resnet18_gn(shape, classes),
    "conv_gn": lambda shape, classes, hidden: _conv_gn(shape, classes),
    "leaf_cnn": lambda shape, classes, hidden: LeafCNN(shape, classes),
    "pfl_cnn": lambda shape, classes, hidden: PflCNN(shape, classes),
    "char_lstm": lambda shape, classes, hidden: CharLSTM(shape, classes),
    "word_lstm": lambda shape, classes, hidden: WordLSTM(shape, classes),
    "word_lstm_small": lambda shape, classes, hidden: WordLSTMSmall(shape, classes),
}
"""The shipped models by name: ``(input_shape, num_classes, hidden) -> FedModel``."""

MODEL_NAMES = tuple(BUILTIN_MODELS)

MODEL_SUMMARIES: dict[str, str] = {
    "mlp": "flatten, hidden ReLU layers of model.hidden widths (the body), linear head",
    "logistic": "multinomial logistic regression (identity body, linear head)",
    "cnn5": "FedReCo's 5-layer CNN: two 5x5 conv + max-pool, FC 1024, FC 1024, linear head",
    "spfl_cnn": "SPFL/PLGA CNN (Table 4): unpadded conv 5x5x20, conv 5x5x50 (max-pools), FC 512, linear head",
    "spfl_cnn_padded": "spfl_cnn with padding-2 convolutions (fits 8x8 digits; quick files)",
    "resnet18_gn": "ResNet-18 with GroupNorm instead of BatchNorm (ImageNet stem from 128 px, CIFAR stem below)",
    "conv_gn": "four conv-GroupNorm-ReLU blocks and global average pooling (body), linear head",
    "leaf_cnn": "LEAF's FEMNIST CNN: two 5x5 conv (32, 64) + max-pool, dense 2048, linear head",
    "pfl_cnn": "pfl-research's simple_cnn: conv 3x3 (32), conv 3x3 (64), max-pool, dropout, dense 128, dropout, head",
    "char_lstm": "LEAF's Shakespeare model: embedding 8, two LSTM layers of 256, linear head over characters",
    "word_lstm": "Stack Overflow next-word model (Reddi et al. 2021): embedding 96, LSTM 670, dense 96, head per token",
    "word_lstm_small": "word_lstm with embedding 16, LSTM 64, dense 16 (quick files)",
}
"""One line per shipped model for ``fedclock list models``."""


def as_fed_model(model: nn.Module, name: str = "the model") -> FedModel:
    """A user's module as a :class:`FedModel` (body, head, stages). The rule:

    * a :class:`FedModel` is used as it is;
    * a module with ``body`` and ``head`` children is rebuilt as ``FedModel(body, head)``:
      its forward must equal ``head(body(x))``, and every parameter must sit in one of them;
      its ``stages`` attribute (stage name -> parameter-name prefixes) is kept, else the
      stages are ``body`` and ``head``;
    * an ``nn.Sequential`` whose last layer is ``nn.Linear``: that layer is the head, the
      layers before it the body.

    Anything else is a ``ValueError`` naming ``model.name``."""
    if isinstance(model, FedModel):
        return model
    body, head = getattr(model, "body", None), getattr(model, "head", None)
    if isinstance(body, nn.Module) and isinstance(head, nn.Module):
        inside = {id(p) for part in (body, head) for p in part.parameters()}
        outside = [n for n, p in model.named_parameters() if id(p) not in inside]
        if outside:
            raise ValueError(f"model.name: {name} has parameters outside .body and .head ({', '.join(outside[:3])}); "
                             "move them into one of the two")
        stages = getattr(model, "stages", None)
        if not isinstance(stages, dict):
            stages = {"body": ("body.",), "head": ("head.",)}
        return FedModel(body, head, stages)
    if isinstance(model, nn.Sequential) and len(model) >= 2 and isinstance(model[-1], nn.Linear):
        return FedModel(nn.Sequential(*list(model)[:-1]), model[-1], {"body": ("body.",), "head": ("head.",)})
    raise ValueError(f"model.name: {name} returned a {type(model).__name__} without .body and .head modules "
                     "(allowed: a module with .body and .head, or an nn.Sequential ending in nn.Linear)")


@dataclass(frozen=True)
class ModelFactory:
    """Builds a model for a dataset and maps parts of it to slices of the flat vector.
    ``builder`` is a user's model (``name`` is then its ``module:attribute`` reference)."""

    name: str
    input_shape: tuple[int, ...]
    num_classes: int
    hidden: tuple[int, ...] = (128,)
    init_seed: int = 0
    builder: ModelBuilder | None = None
    target_shape: tuple[int, ...] = ()
    """Shape of one sample's targets: ``()`` for one class per sample, ``(T,)`` for one per
    token (:mod:`fedclock.algorithms.targets`); what cost counting feeds the model."""

    def build(self) -> FedModel:
        """A fresh model. Construction is seeded by ``init_seed`` so it never touches the
        global RNG; the server replaces these weights with :meth:`initial_weights`."""
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(self.init_seed)
            return self._construct()

    def initial_weights(self, rng: torch.Generator) -> torch.Tensor:
        """Flat initial weights from PyTorch's default initializers, seeded from ``rng``."""
        seed = int(torch.randint(0, 2**62, (1,), generator=rng))
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            return self.flatten(self._construct())

    def _construct(self) -> FedModel:
        if self.builder is not None:
            return as_fed_model(self.builder(tuple(self.input_shape), self.num_classes), self.name)
        make = BUILTIN_MODELS.get(self.name)
        if make is None:
            raise ValueError(f"model.name: unknown model {self.name!r} (allowed: {', '.join(MODEL_NAMES)})")
        return make(self.input_shape, self.num_classes, self.hidden)

    # ------------------------------------------------------------------ layout
    @cached_property
    def layout(self) -> tuple[tuple[str, int, int, tuple[int, ...]], ...]:
        """(name, start, end, shape) of every parameter in the flat vector."""
        out = []
        offset = 0
        for name, p in self.build().named_parameters():
            out.append((name, offset, offset + p.numel(), tuple(p.shape)))
            offset += p.numel()
        return tuple(out)

    @property
    def num_params(self) -> int:
        return self.layout[-1][2] if self.layout else 0

    def part_slice(self, prefixes: Sequence[str]) -> torch.Tensor:
        """Indices into the flat vector of all parameters whose name starts with a prefix."""
        idx = [torch.arange(s, e) for name, s, e, _ in self.layout if any(name.startswith(p) for p in prefixes)]
        return torch.cat(idx) if idx else torch.zeros(0, dtype=torch.long)

    def contiguous_part(self, prefix: str) -> slice:
        """The flat range of a part whose parameters are contiguous (``body.`` or ``head.``)."""
        spans = [(s, e) for name, s, e, _ in self.layout if name.startswith(prefix)]
        if not spans:
            return slice(0, 0)
        start, end = spans[0][0], spans[-1][1]
        if sum(e - s for s, e in spans) != end - start:
            raise ValueError(f"parameters under {prefix!r} are not contiguous")
        return slice(start, end)

    @property
    def body(self) -> slice:
        return self.contiguous_part("body.")

    @property
    def head(self) -> slice:
        return self.contiguous_part("head.")

    def stage_slices(self) -> dict[str, torch.Tensor]:
        """Flat indices of each named stage."""
        model_stages = self.build().stages
        return {name: self.part_slice(prefixes) for name, prefixes in model_stages.items()}

    # ------------------------------------------------------------------ flat <-> module
    @staticmethod
    def flatten(model: nn.Module) -> torch.Tensor:
        """All parameters as one detached float32 vector (a copy)."""
        return torch.cat([p.detach().reshape(-1) for p in model.parameters()]).to(torch.float32).cpu()

    @staticmethod
    def load_flat(model: nn.Module, flat: torch.Tensor) -> None:
        """Copy a flat vector into the model's parameters in place."""
        offset = 0
        with torch.no_grad():
            for p in model.parameters():
                n = p.numel()
                p.copy_(flat[offset:offset + n].view_as(p))
                offset += n
        if offset != flat.numel():
            raise ValueError(f"flat vector has {flat.numel()} values, the model {offset}")
