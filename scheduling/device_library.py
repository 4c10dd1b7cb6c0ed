"""Named device classes and mixtures of them (``population.device_mix``).

Each class gives a distribution for compute speed (GFLOP/s), download and upload bandwidth
and latency, in the units of ``population.devices``, and the memory the device gives to
training. Every distribution is log-normal around a median taken from the source named in
the class (``sigma`` 0.3 for compute and latency, 0.5 for bandwidth, an assumption of ours
that gives a few-fold spread inside a class); memory is one figure per class.

**Compute unit.** Compute is in sustained GFLOP/s, the unit of a task's counted work (the
FLOPs of the algorithm's real local step, :mod:`fedclock.algorithms.task_cost`), so a
ResNet-18 task takes as long as its FLOPs say on the same phone as a small MLP's. Classes
are therefore allowed only with ``population.compute_unit: gflops``.

**Memory** (``memory_gb``, what training may use): half the device's RAM for phones and the
edge box (the operating system and other apps keep the rest; an assumption of ours), all
of the GPU's memory for the datacenter GPU. RAM: Samsung's published specifications of the
Galaxy A04e (3 GB, low-end), Galaxy A54 (6 GB, mid-range), Galaxy S23 (8 GB, high-end);
NVIDIA Jetson Nano module datasheet (4 GB, shared by CPU and GPU); NVIDIA A100 PCIe
datasheet (40 GB).

Sources (medians):

* Phones, compute: Das et al., "Enabling On-Device Smartphone GPU based Training: Lessons
  Learned" (arXiv:2202.10100, 2022) measured DNN training at 15-30 GFLOP/s on the CPUs
  of Snapdragon 8-series (flagship) phones. High-end = 30 GFLOP/s; mid-range and low-end
  are our assumption of one third and one tenth of that (10 and 3 GFLOP/s).
* Phones, network: Ookla Speedtest Intelligence, Q3 2021: global median 5G download
  166 Mbps, upload 21 Mbps (high-end); Ookla's Speedtest Global Index 2017 report: mean
  mobile download 20 Mbps (mid-range: 30 down / 8 up, rounding toward 4G medians of
  recent reports); low-end: 8 down / 2 up (3G/poor 4G). Latency: Ookla market reports
  (Q1 2023) list median mobile multi-server latencies of about 50-180 ms; we use 50 ms
  (high), 80 ms (mid), 150 ms (low).
* Edge box, compute: NVIDIA Jetson Nano module datasheet, 472 GFLOP/s FP16 peak; we
  assume about 10 % sustained in training, 50 GFLOP/s. Network: fixed broadband, Ookla
  Speedtest Global Index 2017 mean fixed download 40 Mbps; we use 100 down / 20 up
  (recent medians are higher), 20 ms.
* Datacenter GPU, compute: NVIDIA A100 datasheet, 19.5 TFLOP/s FP32 (156 TF32); we
  assume 8 TFLOP/s sustained (about 40 % of FP32 peak). Network: a 10 Gbit/s
  datacenter link and 1 ms latency (assumption).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from fedclock.scheduling.distributions import LogNormalDist


@dataclass(frozen=True)
class DeviceClass:
    """A named kind of device: distributions of its four device values and their source."""

    name: str
    summary: str
    compute: LogNormalDist
    down_mbps: LogNormalDist
    up_mbps: LogNormalDist
    latency_s: LogNormalDist
    source: str
    memory_gb: float
    """Memory the device gives to training, GB."""


def _ln(median: float, sigma: float) -> LogNormalDist:
    return LogNormalDist(dist="lognormal", median=median, sigma=sigma)


def _cls(name: str, summary: str, gflops: float, down: float, up: float, latency: float, source: str,
         memory_gb: float) -> DeviceClass:
    return DeviceClass(name, summary, _ln(gflops, 0.3), _ln(down, 0.5), _ln(up, 0.5), _ln(latency, 0.3), source,
                       memory_gb)


DEVICE_CLASSES: dict[str, DeviceClass] = {c.name: c for c in (
    _cls("low_end_phone", "budget phone on a slow mobile link", 3.0, 8.0, 2.0, 0.15,
         "compute: 1/10 of flagship (assumption, see module doc); network: 3G/poor-4G, Ookla market reports; "
         "memory: half of 3 GB (Galaxy A04e)", 1.5),
    _cls("mid_range_phone", "mid-range phone on 4G", 10.0, 30.0, 8.0, 0.08,
         "compute: 1/3 of flagship (assumption); network: Ookla Speedtest Global Index mobile figures; "
         "memory: half of 6 GB (Galaxy A54)", 3.0),
    _cls("high_end_phone", "flagship phone on 5G", 30.0, 166.0, 21.0, 0.05,
         "compute: Das et al. 2022 (arXiv:2202.10100), 15-30 GFLOP/s; network: Ookla Q3 2021 global 5G medians; "
         "memory: half of 8 GB (Galaxy S23)", 4.0),
    _cls("edge_box", "Jetson-class edge device on fixed broadband", 50.0, 100.0, 20.0, 0.02,
         "compute: NVIDIA Jetson Nano datasheet (472 GFLOP/s FP16 peak, ~10% sustained); network: Ookla fixed; "
         "memory: half of the module's 4 GB", 2.0),
    _cls("datacenter_gpu", "A100-class GPU server in a datacenter", 8000.0, 10000.0, 10000.0, 0.001,
         "compute: NVIDIA A100 datasheet (19.5 TFLOP/s FP32, ~40% sustained); network: 10 Gbit/s link (assumption); "
         "memory: 40 GB (A100 PCIe datasheet)", 40.0),
)}


def mix_counts(fractions: list[float], n: int) -> list[int]:
    """How many of ``n`` clients each class gets: boundaries at round-half-up of the
    cumulative fractions, so counts add up to the rounded total and never depend on order
    beyond the cumulative sums."""
    bounds = [0]
    total = 0.0
    for f in fractions:
        total += f
        bounds.append(min(n, math.floor(total * n + 0.5 + 1e-9)))
    return [b - a for a, b in zip(bounds, bounds[1:])]

