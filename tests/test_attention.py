"""training/kernels/attention.py: attention that recomputes its probabilities in the backward equals transformers' eager
attention, output and gradients, and a model trained with it saves as a plain model."""

import json

import pytest
import torch

from training.kernels.attention import attention, register


def _inputs(dtype):
    g = torch.Generator().manual_seed(0)
    q = torch.randn(2, 6, 5, 4, generator=g)  # 6 query heads, 5 queries
    k = torch.randn(2, 2, 7, 4, generator=g)  # 2 key/value heads (3 query heads each), 7 keys: a cached prefix
    v = torch.randn(2, 2, 7, 4, generator=g)
    allowed = torch.ones(5, 7, dtype=torch.bool).tril(diagonal=2)  # query i sees keys 0 .. i + 2
    allowed = allowed[None, None].repeat(2, 1, 1, 1)
    allowed[1, :, :, 0] = False  # row 1's first key is padding
    mask = torch.zeros(allowed.shape).masked_fill(~allowed, torch.finfo(dtype).min).to(dtype)
    return [t.to(dtype).requires_grad_() for t in (q, k, v)], mask


def _eager(q, k, v, mask, scaling):
    from transformers.models.llama.modeling_llama import eager_attention_forward

    module = torch.nn.Module()
    module.num_key_value_groups, module.training = q.shape[1] // k.shape[1], False
    return eager_attention_forward(module, q, k, v, mask, scaling)[0].transpose(1, 2)


@pytest.mark.parametrize("dtype, tol", [(torch.float32, 1e-6), (torch.bfloat16, 2e-2)])
def test_output_and_gradients_equal_eager_attention(dtype, tol):
    (q, k, v), mask = _inputs(dtype)
    upstream = torch.randn(2, 6, 5, 4, generator=torch.Generator().manual_seed(1)).to(dtype)
    ours = attention(q, k, v, mask, 0.5)
    grads = torch.autograd.grad((ours * upstream).sum(), (q, k, v))
    theirs = _eager(q, k, v, mask, 0.5)
    expected = torch.autograd.grad((theirs * upstream).sum(), (q, k, v))
    assert ours.dtype == dtype and (ours.float() - theirs.float()).abs().max() <= tol
    for got, want in zip(grads, expected, strict=True):
        assert got.shape == want.shape and (got.float() - want.float()).abs().max() <= tol * max(1, want.abs().max())
    assert grads[1][1, :, 0].abs().max() == 0  # the padding key got no gradient


def test_a_softmax_worked_by_hand():
    # one head, one query, two keys: scores (1*1, 1*3) * 0.5 = (0.5, 1.5) -> p = (1, e) / (1 + e)
    q = torch.tensor([[[[1.0]]]], requires_grad=True)
    k = torch.tensor([[[[1.0], [3.0]]]], requires_grad=True)
    v = torch.tensor([[[[2.0], [4.0]]]], requires_grad=True)
    out = attention(q, k, v, None, 0.5)
    e = torch.e
    p = torch.tensor([1.0, e]) / (1 + e)
    assert out.item() == pytest.approx(2 * p[0].item() + 4 * p[1].item())
    out.sum().backward()
    assert v.grad.flatten().tolist() == pytest.approx(p.tolist())
    # d out / d score_j = p_j (v_j - out); score_j = 0.5 q k_j
    ds = p * (torch.tensor([2.0, 4.0]) - out.item())
    assert q.grad.item() == pytest.approx((0.5 * ds * torch.tensor([1.0, 3.0])).sum().item())
    assert k.grad.flatten().tolist() == pytest.approx((0.5 * ds * 1.0).tolist())


def test_a_model_with_lean_attention_trains_as_eager_and_saves_as_a_plain_model(tiny_model_dir, tmp_path):
    from transformers import AutoModelForCausalLM

    register()
    ids = torch.randint(0, 100, (2, 9), generator=torch.Generator().manual_seed(2))
    mask = torch.ones_like(ids)
    mask[1, :3] = 0  # left padding
    results = {}
    for kernel in ("eager", "lean"):
        model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, attn_implementation=kernel)
        logits = model(input_ids=ids, attention_mask=mask).logits
        logits[mask.bool()].logsumexp(-1).sum().backward()
        results[kernel] = (logits.detach(), [p.grad.clone() for p in model.parameters()])
        if kernel == "lean":
            model.save_pretrained(tmp_path / "saved")
    (le, ge), (ll, gl) = results["eager"], results["lean"]
    assert (le - ll)[mask.bool()].abs().max() < 1e-5
    assert max((a - b).abs().max().item() for a, b in zip(ge, gl, strict=True)) < 1e-5
    assert "lean" not in json.dumps(json.loads((tmp_path / "saved" / "config.json").read_text()))
