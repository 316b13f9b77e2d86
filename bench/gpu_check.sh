#!/usr/bin/env bash
# GPU numbers in one call, wherever a CUDA GPU is:  bash bench/gpu_check.sh [--model FOLDER] [--out FILE] [--record NOTE]
# (--record keeps the numbers as docs/benchmarks.md's GPU section)
#
# 1. the bench workloads on CUDA in bf16, one process, through the DeepSpeed launcher (bench/gpu_check.py): the PPO
#    step (ZeRO-2 and ZeRO-3), DPO on ranking-shaped pairs (ZeRO-0 and ZeRO-3) and reward-model training;
# 2. the test suite's DeepSpeed tests (reward model, PPO and DPO; the two-rank ones need two GPUs) on CUDA;
# then a short table. Needs the project installed: `make .venv/.installed` (on a machine with nvidia-smi the
# Makefile installs PyPI's CUDA torch), or PYTHON=/path/to/python with the same packages.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-.venv/bin/python}
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
"$PYTHON" - <<'PY'
import torch
assert torch.cuda.is_available(), "no CUDA device visible to torch"
print(f"torch {torch.__version__}, CUDA {torch.version.cuda}, {torch.cuda.get_device_name(0)}")
PY
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
"$PYTHON" -m bench.gpu_check "$@"
TESTS=${TESTS:-tests/test_ppo_training.py tests/test_reward_training.py tests/test_dpo_training.py}
# shellcheck disable=SC2086
timeout "${TEST_TIMEOUT:-600}" "$PYTHON" -m pytest -q -p no:cacheprovider ${PYTEST_K:+-k "$PYTEST_K"} $TESTS 2>&1 | tail -15 || true
