"""The decode's steps for a Llama-architecture model without transformers' per-call machinery.

After the prompt, each decode step is one token per row through every layer. Transformers' forward spends a fair
part of that step outside the model's own work: it builds a mask, updates a cache object, expands the keys and
values to every query head, and attends over the whole preallocated cache. Here the prompt goes through the
model's own forward once, in SDPA (decode.py says why), its keys and values copied into this loop's cache, and
each step then calls the model's modules directly (norms, projections, rotary embedding, MLP) with eager attention
over only the positions filled so far, each key/value head serving its query heads without a copy, and keys
stored transposed so a step reads k^T in place. The same operations in the same order and dtypes as transformers'
eager attention, whose forward the trainers' kernel (training/kernels/attention.py) also computes; a model loaded with
SDPA (the Compare tab's) rounds differently by about 1e-6 in fp32 (tests/test_decode.py compares the logits with
transformers').

On SmolLM2-135M, bf16, 8 rows, 64 + 64 tokens, weights packed (training/kernels/linear.py): 1.45 s a decode against
transformers' 1.70. Models it does not cover take the transformers path (decode.py)."""

from __future__ import annotations

import torch

from training.kernels.hf_cache import with_cache
from training.kernels.logprobs import position_ids


def covers(model) -> bool:
    """A plain (unwrapped) transformers Llama on a CPU, with weights held whole (not ZeRO-3's partitions)."""
    config = getattr(model, "config", None)
    core = getattr(model, "model", None)
    if config is None or config.model_type != "llama" or core is None or not hasattr(core, "layers"):
        return False
    if getattr(config, "pretraining_tp", 1) != 1 or not hasattr(model, "lm_head"):
        return False
    weight = model.lm_head.weight
    return weight.device.type == "cpu" and not hasattr(weight, "ds_id")


class LlamaSteps:
    """One decode: `first` holds the logits after the prompt; `step(token, t)` feeds the t-th sampled token (B,)
    and returns the next logits (B, V). The cache holds P + `new_tokens` positions."""

    def __init__(self, model, prompt_ids: torch.Tensor, prompt_mask: torch.Tensor, new_tokens: int):
        from transformers import DynamicCache

        self.model, self.core, config = model, model.model, model.config
        B, P = prompt_ids.shape
        self.heads, self.kv_heads = config.num_attention_heads, config.num_key_value_heads
        self.head_dim = getattr(config, "head_dim", None) or config.hidden_size // self.heads
        cache = DynamicCache(config=config)
        positions = position_ids(prompt_mask)
        out = model(
            input_ids=prompt_ids,
            attention_mask=prompt_mask,
            position_ids=positions,
            **with_cache(cache),
            use_cache=True,
            logits_to_keep=1,
        )
        self.first = out.logits[:, -1]
        dtype = self.first.dtype
        shape = (B, self.kv_heads, P + new_tokens, self.head_dim)
        self.keys, self.values = [], []  # keys transposed, (B, kv heads, d, positions): a step reads k^T in place
        for layer in cache.layers:
            k = torch.zeros(B, self.kv_heads, self.head_dim, P + new_tokens, dtype=layer.keys.dtype)
            v = torch.zeros(shape, dtype=layer.values.dtype)
            k[..., :P], v[:, :, :P] = layer.keys.transpose(2, 3), layer.values
            self.keys.append(k)
            self.values.append(v)
        # eager's additive mask for a query after the prompt: the prompt's padding is out, every later position in
        self.mask = torch.zeros(B, 1, 1, P + new_tokens, dtype=dtype)
        self.mask[:, 0, 0, :P].masked_fill_(prompt_mask == 0, torch.finfo(dtype).min)
        self.prompt_len, self.next_position = P, positions[:, -1:] + 1

    def step(self, token: torch.Tensor, t: int) -> torch.Tensor:
        from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

        B, n = token.shape[0], self.prompt_len + t + 1  # positions filled once this token is in
        x = self.core.embed_tokens(token[:, None])
        cos, sin = self.core.rotary_emb(x, self.next_position)
        for i, layer in enumerate(self.core.layers):
            attn = layer.self_attn
            h = layer.input_layernorm(x)
            q = attn.q_proj(h).view(B, 1, self.heads, self.head_dim).transpose(1, 2)
            k = attn.k_proj(h).view(B, 1, self.kv_heads, self.head_dim).transpose(1, 2)
            v = attn.v_proj(h).view(B, 1, self.kv_heads, self.head_dim).transpose(1, 2)
            q, k = apply_rotary_pos_emb(q, k, cos, sin)
            self.keys[i][..., n - 1], self.values[i][:, :, n - 1] = k[:, :, 0], v[:, :, 0]
            x = x + attn.o_proj(self._attend(q, i, n, attn.scaling))
            x = x + layer.mlp(layer.post_attention_layernorm(x))
        self.next_position = self.next_position + 1
        return self.model.lm_head(self.core.norm(x)[:, -1])

    def _attend(self, q: torch.Tensor, layer: int, n: int, scaling: float) -> torch.Tensor:
        """Eager attention of one query per row over the first n positions: (B, H, 1, d) -> (B, 1, H * d). The
        query heads of one key/value head are stacked as rows of one product (GQA without copying keys)."""
        B, groups = q.shape[0], self.heads // self.kv_heads
        q = q.reshape(B, self.kv_heads, groups, self.head_dim)
        scores = torch.matmul(q, self.keys[layer][..., :n]) * scaling + self.mask[..., :n]
        probs = torch.softmax(scores, dim=-1, dtype=torch.float32).to(q.dtype)
        return torch.matmul(probs, self.values[layer][:, :, :n]).reshape(B, 1, self.heads * self.head_dim)
