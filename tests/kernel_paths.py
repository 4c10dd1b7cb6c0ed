"""Run the ``numerics``-marked tests again under every CPU kernel path below this machine's.

    python -m tests.kernel_paths [PYTEST ARGS ...]

PyTorch picks its CPU kernels by the processor's vector width
(``torch.backends.cpu.get_cpu_capability()``) and the environment variable
``ATEN_CPU_CAPABILITY`` forces a lower one. A tolerance that holds on one path only fails on
another machine; running the tests that compare differently ordered float computations
(``pytest -m numerics``, :mod:`tests.numerics`) under each lower path makes it fail on the
developer's own machine first. ``.ci/run`` calls this after the README's test command.

Exit status: 0 when every path passed (or the machine has no lower path), else the first
failing run's pytest status.
"""
from __future__ import annotations

import os
import subprocess
import sys

import torch

X86_PATHS = ("default", "avx2", "avx512")
"""PyTorch's x86 CPU kernel paths, lowest first (``ATEN_CPU_CAPABILITY`` values)."""


def lower_paths(current: str) -> list[str]:
    """The kernel paths below ``current`` (PyTorch's name for it, any case): the x86 ones
    before it; on other processors ``default`` unless that is the current one."""
    name = current.lower()
    if name in X86_PATHS:
        return list(X86_PATHS[:X86_PATHS.index(name)])
    return [] if name == "default" else ["default"]


def main(argv: list[str]) -> int:
    """Run ``pytest -m numerics`` (plus ``argv``) under each lower path; see the module docstring."""
    current = torch.backends.cpu.get_cpu_capability()
    paths = lower_paths(current)
    print(f"kernel paths: this machine runs {current}; numerics tests again under {', '.join(paths) or 'none'}",
          flush=True)
    for path in paths:
        env = {**os.environ, "ATEN_CPU_CAPABILITY": path}
        print(f"--- ATEN_CPU_CAPABILITY={path}: pytest -m numerics", flush=True)
        code = subprocess.call([sys.executable, "-m", "pytest", "-m", "numerics", "-p", "no:cacheprovider", *argv],
                               env=env)
        if code != 0:
            print(f"kernel paths: the numerics tests failed under ATEN_CPU_CAPABILITY={path}", flush=True)
            return code
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
