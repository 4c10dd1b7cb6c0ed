"""Models: output shapes, body/head split of the flat vector, named stages."""
from __future__ import annotations

import pytest
import torch

from fedclock.algorithms.models import MODEL_NAMES, ModelFactory

SHAPES = {"mlp": (1, 8, 8), "logistic": (1, 8, 8), "cnn5": (1, 28, 28), "spfl_cnn": (1, 28, 28),
          "spfl_cnn_padded": (1, 8, 8),
          "resnet18_gn": (3, 32, 32), "conv_gn": (1, 8, 8), "leaf_cnn": (1, 28, 28), "pfl_cnn": (3, 32, 32),
          "char_lstm": (80,),
          "word_lstm": (20,), "word_lstm_small": (20,)}
WORDS = ("word_lstm", "word_lstm_small")
"""Next-word models: index inputs, one prediction per position."""


@pytest.mark.parametrize("name", MODEL_NAMES)
def test_model_shapes_and_parts(name: str) -> None:
    factory = ModelFactory(name, SHAPES[name], 7, (16,))
    model = factory.build()
    indices = name == "char_lstm" or name in WORDS
    x = torch.randint(0, 7, (2, *SHAPES[name])).float() if indices else torch.randn(2, *SHAPES[name])
    assert model(x).shape == ((2, 20, 7) if name in WORDS else (2, 7))
    flat = factory.flatten(model)
    assert flat.numel() == factory.num_params == sum(p.numel() for p in model.parameters())
    # body then head cover the whole vector; the head is the last linear layer
    assert factory.body.stop == factory.head.start and factory.head.stop == factory.num_params
    assert factory.head.stop - factory.head.start == model.head.weight.numel() + model.head.bias.numel()
    # stages partition the parameters
    stages = factory.stage_slices()
    covered = torch.cat(list(stages.values()))
    assert sorted(covered.tolist()) == list(range(factory.num_params))


def test_spfl_cnn_is_the_papers_unpadded_network() -> None:
    """SPFL/PLGA paper, Table 4: 0.44M parameters on MNIST (valid 5x5 convolutions: 28 -> 24
    -> 12 -> 8 -> 4, so FC 512 sees 50 * 4 * 4 inputs); two stages, base and head."""
    factory = ModelFactory("spfl_cnn", (1, 28, 28), 10)
    assert factory.num_params == (20 * 25 + 20) + (50 * 20 * 25 + 50) + (800 * 512 + 512) + (512 * 10 + 10) == 440_812
    assert list(factory.stage_slices()) == ["base", "head"]
    assert ModelFactory("spfl_cnn_padded", (1, 28, 28), 10).num_params == 1_285_612
    with pytest.raises(ValueError, match="spfl_cnn_padded"):
        ModelFactory("spfl_cnn", (1, 8, 8), 10).build()


def test_resnet18_gn_structure() -> None:
    factory = ModelFactory("resnet18_gn", (3, 32, 32), 10)
    model = factory.build()
    assert not any(isinstance(m, torch.nn.BatchNorm2d) for m in model.modules())
    norms = [m for m in model.modules() if isinstance(m, torch.nn.GroupNorm)]
    assert norms and all(m.num_groups == 2 for m in norms)
    assert list(factory.stage_slices()) == ["stem", "layer1", "layer2", "layer3", "layer4", "head"]
    assert model.features(torch.randn(1, 3, 64, 64)).shape == (1, 512)  # TinyImageNet size
    # ResNet-18: 11.17M parameters with a 10-class head (GroupNorm has the same affine count as BatchNorm)
    assert factory.num_params == 11_173_962


def _final_map(model: torch.nn.Module, side: int) -> tuple[int, ...]:
    """Shape of the last residual stage's output (body.6) for one image of ``side`` pixels."""
    shapes = []
    handle = model.body[6].register_forward_hook(lambda m, i, o: shapes.append(tuple(o.shape)))
    with torch.no_grad():
        model.features(torch.randn(1, 3, side, side))
    handle.remove()
    return shapes[0]


def test_resnet18_gn_stem_follows_the_input_size() -> None:
    """He et al. 2016: 224 px gets the ImageNet stem (7x7 stride 2 + 3x3 max-pool stride 2:
    224 / 32 = 7x7 final map); 32 and 64 px keep the CIFAR stem (3x3 stride 1, no pool:
    32 / 8 = 4x4). The 7x7 kernel adds (49 - 9) x 3 x 64 = 7,680 weights."""
    small, large = ModelFactory("resnet18_gn", (3, 32, 32), 10), ModelFactory("resnet18_gn", (3, 224, 224), 10)
    small_model, large_model = small.build(), large.build()
    assert small_model.body[0].kernel_size == (3, 3) and small_model.body[0].stride == (1, 1)
    assert isinstance(small_model.body[2], torch.nn.ReLU)
    assert large_model.body[0].kernel_size == (7, 7) and large_model.body[0].stride == (2, 2)
    assert any(isinstance(m, torch.nn.MaxPool2d) for m in large_model.body[2].modules())
    assert large.num_params == small.num_params + 7_680
    assert list(large.stage_slices()) == list(small.stage_slices())
    assert _final_map(small_model, 32) == (1, 512, 4, 4)
    assert _final_map(ModelFactory("resnet18_gn", (3, 64, 64), 10).build(), 64) == (1, 512, 8, 8)
    assert _final_map(large_model, 224) == (1, 512, 7, 7)


def test_conv_gn_structure() -> None:
    factory = ModelFactory("conv_gn", (3, 32, 32), 10)
    model = factory.build()
    assert not any(isinstance(m, torch.nn.BatchNorm2d) for m in model.modules())
    assert model.features(torch.randn(2, 3, 32, 32)).shape == (2, 128)
    assert model.features(torch.randn(2, 3, 8, 8)).shape == (2, 128)


def test_leaf_models_are_leafs_reference_networks() -> None:
    """LEAF's FEMNIST CNN: conv 5x5x32 (same), pool, conv 5x5x64, pool, dense 2048, 62 classes;
    Shakespeare: embedding 8 over 80 characters, two LSTM layers of 256, dense 80."""
    cnn = ModelFactory("leaf_cnn", (1, 28, 28), 62)
    assert cnn.num_params == (32 * 25 + 32) + (64 * 32 * 25 + 64) + (7 * 7 * 64 * 2048 + 2048) + (2048 * 62 + 62)
    lstm = ModelFactory("char_lstm", (80,), 80)
    four_gates = 4 * 256
    layer1 = four_gates * (8 + 256) + 2 * four_gates
    layer2 = four_gates * (256 + 256) + 2 * four_gates
    assert lstm.num_params == 80 * 8 + layer1 + layer2 + (256 * 80 + 80)
    assert lstm.head.stop - lstm.head.start == 256 * 80 + 80
    model = lstm.build()
    x = torch.randint(0, 80, (3, 80)).float()
    assert model(x).shape == (3, 80) and model.features(x).shape == (3, 256)
    with pytest.raises(ValueError, match="char_lstm reads sequences"):
        ModelFactory("char_lstm", (1, 28, 28), 62).build()


def test_pfl_cnn_is_pfl_researchs_simple_cnn() -> None:
    """pfl-research's simple_cnn on CIFAR-10: valid 3x3 convolutions 32 -> 30 -> 28, 2x2 pool
    -> 14, so dense 128 sees 64 * 14 * 14 = 12,544 inputs: 896 + 18,496 + 1,605,760 + 1,290
    = 1,626,442 parameters; two dropout layers (0.25, 0.5); Glorot-uniform weights (bound
    sqrt(6 / (fan_in + fan_out))), zero-free default biases."""
    factory = ModelFactory("pfl_cnn", (3, 32, 32), 10)
    assert factory.num_params == (3 * 9 * 32 + 32) + (32 * 9 * 64 + 64) + (12_544 * 128 + 128) + (128 * 10 + 10)
    assert factory.num_params == 1_626_442
    model = factory.build()
    assert [m.p for m in model.modules() if isinstance(m, torch.nn.Dropout)] == [0.25, 0.5]
    dense = model.body[7]
    bound = (6 / (12_544 + 128)) ** 0.5  # Glorot: fan_in 12,544, fan_out 128
    assert dense.weight.abs().max() <= bound and dense.weight.abs().max() > 0.95 * bound
    conv1 = model.body[0]
    bound1 = (6 / (3 * 9 + 32 * 9)) ** 0.5
    assert conv1.weight.abs().max() <= bound1 and conv1.weight.abs().max() > 0.9 * bound1
    model.eval()
    assert model(torch.randn(4, 3, 32, 32)).shape == (4, 10)
    assert list(factory.stage_slices()) == ["conv", "fc"]
    with pytest.raises(ValueError, match="pfl_cnn needs images of at least 6x6"):
        ModelFactory("pfl_cnn", (3, 5, 5), 10).build()
