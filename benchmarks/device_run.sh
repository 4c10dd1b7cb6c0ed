#!/usr/bin/env bash
# The GPU machine's measurements (issue 35) in one call, each step under its own `timeout` so
# that one hang does not lose the others, each writing to its own file in OUT_DIR (flat):
#
#   nvidia_smi.txt        the device, driver and memory (nvidia-smi)
#   cuda_tests.txt        pytest -m cuda: vectorized kernels vs the per-client path on the GPU,
#                         GPU-fraction actors placed and training together, whole runs with
#                         runtime.device: cuda (inline and Ray) against the CPU's tables
#   vectorized_cuda.txt   benchmarks/vectorized.py --device cuda
#   gpu_fractions.txt     benchmarks/gpu_fractions.py --actors 1 2 4
#   e2e_gpu.txt           benchmarks/e2e.py --device cuda: CIFAR-10-shaped workloads (cnn5,
#                         resnet18_gn), fedclock (Ray with GPU fractions, vectorized, inline)
#                         against the plain single-process PyTorch loop on the same GPU
#   e2e_cpu_scaling.txt   benchmarks/e2e.py --ray-executors 1,2,4,8,16: the Ray backend on CPU cores
#   steps.txt             one line per step: name, exit status, seconds (124: its timeout hit)
#
# It installs nothing: fedclock and its dependencies must be importable by $PYTHON (default
# python3). Run from anywhere; it works in the repository holding it.
#
#   benchmarks/device_run.sh OUT_DIR [--tiny] [--only step,step,...]
#
# --tiny: sizes that a small CPU machine runs in a few minutes, to check this script; without
# CUDA the GPU steps then say so in one line (the CUDA tests report skips), except e2e_gpu,
# which runs the same comparison on the CPU (cnn5 only). --only: run just these steps (names as the files, without .txt), e.g. after a timeout.
# Expected on an H100 machine with 16 cores (estimates, see /work/device_requests/gpu.txt):
# about 5.5 minutes in all; the timeouts below add up to 585 s.
set -u
OUT_DIR=""
TINY=0
ONLY=""
while [ $# -gt 0 ]; do
  case "$1" in
    --tiny) TINY=1 ;;
    --only) shift; ONLY="${1:-}" ;;
    -h|--help) sed -n '2,30p' "$0"; exit 0 ;;
    -*) echo "device_run.sh: unknown option $1 (allowed: --tiny, --only STEPS)" >&2; exit 2 ;;
    *) OUT_DIR="$1" ;;
  esac
  shift
done
if [ -z "$OUT_DIR" ]; then
  echo "usage: benchmarks/device_run.sh OUT_DIR [--tiny] [--only step,step,...]" >&2
  exit 2
fi
mkdir -p "$OUT_DIR" || exit 2
OUT_DIR="$(cd "$OUT_DIR" && pwd)"
cd "$(dirname "$0")/.." || exit 2
PY="${PYTHON:-python3}"
export PYTHONUNBUFFERED=1 RAY_USAGE_STATS_ENABLED=0
if "$PY" -c "import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null; then
  CUDA=1
else
  CUDA=0
fi

wanted() { [ -z "$ONLY" ] || [[ ",$ONLY," == *",$1,"* ]]; }

# step NAME TIMEOUT_S COMMAND...: run COMMAND with its output in OUT_DIR/NAME.txt
step() {
  local name="$1" limit="$2"
  shift 2
  wanted "$name" || return 0
  local file="$OUT_DIR/$name.txt" start end rc tenths
  { [ -n "${STEP_NOTE:-}" ] && echo "# $STEP_NOTE"; echo "# $(date -u +%FT%TZ) timeout ${limit}s: $*"; } >"$file"
  start=$(date +%s%N)
  timeout --kill-after=10 "$limit" "$@" >>"$file" 2>&1
  rc=$?
  end=$(date +%s%N)
  tenths=$(( (end - start) / 100000000 ))
  printf '%-18s rc %3d  %4d.%d s  %s\n' "$name" "$rc" $((tenths / 10)) $((tenths % 10)) "$*" >>"$OUT_DIR/steps.txt"
  [ "$rc" -eq 124 ] && echo "# timed out after ${limit}s" >>"$file"
  return 0
}

# skip NAME REASON: the step's file says in one line why it did not run
skip() {
  wanted "$1" || return 0
  echo "$1: skipped: $2" | tee "$OUT_DIR/$1.txt"
  printf '%-18s skipped: %s\n' "$1" "$2" >>"$OUT_DIR/steps.txt"
}

{ echo "# device_run.sh $(date -u +%FT%TZ) tiny=$TINY cuda=$CUDA python=$PY $(nproc) CPUs"
  "$PY" -c "import platform, torch, ray, fedclock.scheduling; print('# Python', platform.python_version(), 'torch',
torch.__version__, 'ray', ray.__version__, 'fedclock from', fedclock.scheduling.__file__)" 2>&1 | tail -1
  git rev-parse HEAD 2>/dev/null; } >>"$OUT_DIR/steps.txt"

if command -v nvidia-smi >/dev/null 2>&1; then
  step nvidia_smi 15 nvidia-smi
else
  skip nvidia_smi "no nvidia-smi on this machine"
fi

CUDA_TESTS=(tests/algorithms/test_vectorized.py tests/algorithms/test_vectorized_eval.py
            tests/actors/test_cuda_runs.py tests/benchmarks/test_gpu_fractions.py)
step cuda_tests 120 "$PY" -m pytest -m cuda -p no:cacheprovider -q -rs "${CUDA_TESTS[@]}"

if [ "$CUDA" = 1 ]; then
  if [ "$TINY" = 1 ]; then
    step vectorized_cuda 60 "$PY" benchmarks/vectorized.py --device cuda --clients 4 --samples 20 \
      --configs mlp:8:128,cnn5:8
  else
    step vectorized_cuda 60 "$PY" benchmarks/vectorized.py --device cuda
  fi
else
  skip vectorized_cuda "no CUDA device visible to PyTorch"
fi

# without CUDA the script says so in one line and exits 0
if [ "$TINY" = 1 ]; then
  step gpu_fractions 60 "$PY" benchmarks/gpu_fractions.py --actors 1 2 --tasks 2
else
  step gpu_fractions 60 "$PY" benchmarks/gpu_fractions.py --actors 1 2 4
fi

E2E=(benchmarks/e2e.py --workloads cifar_cnn5,cifar_resnet --vectorize 50)
if [ "$CUDA" = 1 ]; then
  if [ "$TINY" = 1 ]; then
    step e2e_gpu 210 "$PY" "${E2E[@]}" --device cuda --tiny --side-timeout 60
  else
    step e2e_gpu 210 "$PY" "${E2E[@]}" --device cuda --gpu-actors 4 --side-timeout 60
  fi
elif [ "$TINY" = 1 ]; then
  STEP_NOTE="no CUDA device: the same comparison on the CPU, tiny, cnn5 only" \
    step e2e_gpu 900 "$PY" benchmarks/e2e.py --workloads cifar_cnn5 --vectorize 50 --device cpu --tiny \
    --plain-threads 1 --side-timeout 300
else
  skip e2e_gpu "no CUDA device visible to PyTorch"
fi

if [ "$TINY" = 1 ]; then
  step e2e_cpu_scaling 900 "$PY" benchmarks/e2e.py --workloads cifar_cnn5 --ray-executors 1,2 --tiny --side-timeout 300
else
  step e2e_cpu_scaling 120 "$PY" benchmarks/e2e.py --workloads cifar_cnn5 --ray-executors 1,2,4,8,16 --rounds 2 \
    --test-images 2000 --side-timeout 60
fi
echo "# done $(date -u +%FT%TZ)" >>"$OUT_DIR/steps.txt"
