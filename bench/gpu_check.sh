#!/usr/bin/env bash
# GPU numbers in one call, wherever a CUDA GPU is:  bash bench/gpu_check.sh
#
# 1. the PPO bench workload (bench/ppo.py: SmolLM2-135M actor/reference, scalar-head critic/reward, 8 x 64+64
#    tokens, ppo_epochs 1) on CUDA in bf16 with ZeRO-2 and ZeRO-3, one process, through the DeepSpeed launcher;
# 2. the test suite's DeepSpeed tests (reward model and PPO, one and two ranks, ZeRO 2/3) on CUDA;
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
"$PYTHON" -m bench.gpu_check
"$PYTHON" -m pytest -q -x tests/test_ppo_training.py tests/test_reward_training.py 2>&1 | tail -5
