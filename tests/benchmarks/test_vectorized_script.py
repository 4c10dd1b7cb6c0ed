"""``benchmarks/vectorized.py``'s default configurations each build their model.

The GPU run of this session found the default list naming ``spfl_cnn`` at 8x8, which the
model refuses (it needs 16x16 without padding): the script stopped after two of its five
configurations. Building each default model is cheap and catches that here.
"""
from __future__ import annotations

import argparse

import pytest
import torch

from fedclock.algorithms.models import ModelFactory

from .scripts import load_script


def _default_configs(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The script's ``--configs`` default, read by running its ``main`` up to argument parsing."""
    module = load_script("vectorized")
    seen: dict[str, str] = {}
    real_parse = argparse.ArgumentParser.parse_args

    def capture(self: argparse.ArgumentParser, *args: object, **kwargs: object) -> argparse.Namespace:
        seen["configs"] = real_parse(self, []).configs
        raise SystemExit(0)

    monkeypatch.setattr(argparse.ArgumentParser, "parse_args", capture)
    with pytest.raises(SystemExit):
        module.main()
    return seen["configs"].split(",")


def test_every_default_configuration_builds_its_model(monkeypatch: pytest.MonkeyPatch) -> None:
    configs = _default_configs(monkeypatch)
    assert len(configs) >= 4
    for config in configs:
        name, side, *rest = config.split(":")
        hidden = tuple(int(h) for h in rest[0].split("-")) if rest else (128,)
        factory = ModelFactory(name, (1, int(side), int(side)), 10, hidden=hidden)
        assert factory.initial_weights(torch.Generator().manual_seed(0)).numel() == factory.num_params
