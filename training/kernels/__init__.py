"""The CPU fast paths under every trainer: attention, packed linears, a Llama decode step, the bf16 optimizer step, the
KV cache, per-token log-probs. (docs/architecture.md: training/ in rooms)"""
