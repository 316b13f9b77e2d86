"""The PPO bench workload on a CUDA GPU (bf16, ZeRO-2 and ZeRO-3, one process); prints a short table. Called by
bench/gpu_check.sh. The peers are not run here: their CPU figures come from `make bench`."""

from __future__ import annotations

import tempfile
from pathlib import Path

from bench.ppo import BATCH, NEW_TOKENS, PROMPT_TOKENS, run_ours, workload


def main() -> None:
    rows = []
    with tempfile.TemporaryDirectory(prefix="gpu-check-") as d:
        tmp = Path(d)
        w = workload(tmp)
        for stage in (2, 3):
            rows.append((stage, run_ours(w, tmp, "bf16", zero_stage=stage)))
    print(f"\nPPO step, {BATCH} x ({PROMPT_TOKENS} + {NEW_TOKENS}) tokens, bf16, one GPU")
    print("| ZeRO | s/step | tokens/s | generation share | peak GPU MB | peak host MB |")
    print("|---|---|---|---|---|---|")
    for stage, r in rows:
        print(
            f"| {stage} | {r['s_per_step']:.2f} | {r['tokens_per_s']:.0f} | {r['gen_share']:.0%} | "
            f"{r.get('peak_gpu_mb', 0):.0f} | {r['peak_rss_mb']:.0f} |"
        )


if __name__ == "__main__":
    main()
