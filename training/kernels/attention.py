"""Attention that keeps only its inputs for the backward pass and recomputes the probabilities there.

Transformers' eager attention (the fastest kernel for training on a CPU, see training/models.py::training_attention)
keeps for its backward the key and value copied out to every query head, the scores' softmax in fp32 and the
probabilities again in the model's dtype: 620 MB over SmolLM2-135M's 30 layers for 8 sequences of 128 tokens in
bf16, as much as the rest of its activations. Here the forward keeps q, k and v as they come, and the backward
recomputes the softmax (two (L x S) products per head, small next to the layer's linear maps) and applies the
softmax's gradient by hand, in the same order and dtypes as eager's autograd. Same math, as a tested function:
`attention(q, k, v, mask, scaling)` equals eager's output and gradients.

Registered with transformers as "lean" (with eager's additive mask); models load with
attn_implementation="lean" after `register()`."""

from __future__ import annotations

import torch

NAME = "lean"


def _expand(x: torch.Tensor, groups: int) -> torch.Tensor:
    """(B, Hkv, S, d) -> (B, Hkv * groups, S, d): each key/value head serves `groups` query heads (GQA)."""
    return x if groups == 1 else x.repeat_interleave(groups, dim=1)


def _fold(x: torch.Tensor, groups: int) -> torch.Tensor:
    """The gradient of _expand: (B, H, S, d) summed back over each head's group -> (B, H / groups, S, d)."""
    if groups == 1:
        return x
    B, H, S, d = x.shape
    return x.view(B, H // groups, groups, S, d).sum(2)


def _probs(q, k, mask, scaling) -> torch.Tensor:
    """Eager's probabilities: (q k^T) * scaling + mask, softmax in fp32, back to q's dtype."""
    scores = torch.matmul(q, k.transpose(2, 3)) * scaling
    if mask is not None:
        scores = scores + mask
    return torch.softmax(scores, dim=-1, dtype=torch.float32)


class _Attention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, mask, scaling: float, groups: int):
        p = _probs(q, _expand(k, groups), mask, scaling).to(q.dtype)
        ctx.save_for_backward(q, k, v, mask)
        ctx.scaling, ctx.groups = scaling, groups
        return torch.matmul(p, _expand(v, groups))

    @staticmethod
    def backward(ctx, grad_out):
        q, k, v, mask = ctx.saved_tensors
        scaling, groups = ctx.scaling, ctx.groups
        kx, vx = _expand(k, groups), _expand(v, groups)
        p32 = _probs(q, kx, mask, scaling)
        p = p32.to(q.dtype)
        grad_v = _fold(torch.matmul(p.transpose(2, 3), grad_out), groups)
        grad_p = torch.matmul(grad_out, vx.transpose(2, 3)).float()
        grad_scores = (p32 * (grad_p - (grad_p * p32).sum(-1, keepdim=True))).to(q.dtype) * scaling
        grad_q = torch.matmul(grad_scores, kx)
        grad_k = _fold(torch.matmul(grad_scores.transpose(2, 3), q), groups)
        return grad_q, grad_k, grad_v, None, None, None


def attention(q, k, v, mask, scaling: float) -> torch.Tensor:
    """softmax((q k^T) * scaling + mask) v, (B, H, L, d) queries over (B, Hkv, S, d) keys and values. Without a
    gradient to keep (a decode step, a frozen model) it is eager's forward as it stands."""
    groups = q.shape[1] // k.shape[1]
    if torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad):
        return _Attention.apply(q, k, v, mask, scaling, groups)
    return torch.matmul(_probs(q, _expand(k, groups), mask, scaling).to(q.dtype), _expand(v, groups))


def lean_attention_forward(module, query, key, value, attention_mask, scaling: float, dropout: float = 0.0, **_):
    """transformers' attention interface: (output (B, L, H, d), no weights). Dropout is off in every trainer."""
    if dropout:
        raise ValueError("lean attention has no dropout (the trainers turn dropout off)")
    return attention(query, key, value, attention_mask, scaling).transpose(1, 2).contiguous(), None


def register() -> None:
    from transformers import AttentionInterface, AttentionMaskInterface
    from transformers.masking_utils import eager_mask

    AttentionInterface.register(NAME, lean_attention_forward)
    AttentionMaskInterface.register(NAME, eager_mask)
