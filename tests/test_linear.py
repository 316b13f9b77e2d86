"""training/kernels/linear.py: linear layers through oneDNN give nn.Linear's numbers and gradients, packed weights give
the same forwards inside their `with` and leave nothing behind, and the decode samples what it sampled before."""

from types import SimpleNamespace

import pytest
import torch

from training.kernels.linear import _OneDNNLinear, onednn_linears, packed_linears

pytestmark = pytest.mark.skipif(not torch.backends.mkldnn.is_available(), reason="a torch build without oneDNN")


def test_a_linear_layer_worked_by_hand():
    # y = x W^T + b with x = (1, 2), W = [[1, 0], [2, 3], [-1, 1]], b = (0.5, 0, -1): y = (1.5, 8, 0)
    x = torch.tensor([[1.0, 2.0]], requires_grad=True)
    w = torch.tensor([[1.0, 0.0], [2.0, 3.0], [-1.0, 1.0]], requires_grad=True)
    b = torch.tensor([0.5, 0.0, -1.0], requires_grad=True)
    y = _OneDNNLinear.apply(x, w, b)
    assert y.tolist() == [[1.5, 8.0, 0.0]]
    (y * torch.tensor([[1.0, -1.0, 2.0]])).sum().backward()  # upstream g = (1, -1, 2)
    assert x.grad.tolist() == [[1 * 1 - 2 - 2, 0 - 3 + 2]]  # g W
    assert w.grad.tolist() == [[1.0, 2.0], [-1.0, -2.0], [2.0, 4.0]]  # g^T x
    assert b.grad.tolist() == [1.0, -1.0, 2.0]


def test_forward_and_gradients_equal_torch_linear_on_three_dimensional_input():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(3, 5, 16, generator=g, requires_grad=True)
    w = torch.randn(24, 16, generator=g, requires_grad=True)
    b = torch.randn(24, generator=g, requires_grad=True)
    up = torch.randn(3, 5, 24, generator=g)
    ours = _OneDNNLinear.apply(x, w, b)
    mine = torch.autograd.grad((ours * up).sum(), (x, w, b))
    theirs = torch.nn.functional.linear(x, w, b)
    want = torch.autograd.grad((theirs * up).sum(), (x, w, b))
    assert ours.shape == (3, 5, 24) and (ours - theirs).abs().max() < 1e-5
    for got, exp in zip(mine, want, strict=True):
        assert got.shape == exp.shape and (got - exp).abs().max() < 1e-4 * exp.abs().max()


def _batch():
    ids = torch.randint(0, 100, (2, 9), generator=torch.Generator().manual_seed(2))
    mask = torch.ones_like(ids)
    mask[1, :3] = 0  # left padding
    return ids, mask


def test_an_fp32_model_trains_as_before_and_a_bf16_model_is_left_alone(tiny_model_dir):
    from transformers import AutoModelForCausalLM

    ids, mask = _batch()
    results = []
    for patch in (False, True):
        model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
        if patch:
            onednn_linears(model)
            patched = [m for m in model.modules() if "forward" in m.__dict__]
            assert patched and all(isinstance(m, torch.nn.Linear) for m in patched)
        logits = model(input_ids=ids, attention_mask=mask).logits
        logits[mask.bool()].logsumexp(-1).sum().backward()
        results.append((logits.detach(), [p.grad.clone() for p in model.parameters()]))
    (lp, gp), (lo, go) = results
    assert (lp - lo)[mask.bool()].abs().max() < 1e-5
    assert max(((a - b).abs().max() / a.abs().max().clamp(min=1e-6)).item() for a, b in zip(gp, go, strict=True)) < 1e-4
    bf16 = onednn_linears(AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.bfloat16))
    assert not any("forward" in m.__dict__ for m in bf16.modules())  # torch already runs bf16 through oneDNN


@pytest.mark.integration
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_packed_weights_give_the_same_logits_and_are_gone_after_the_with(tiny_model_dir, dtype):
    from transformers import AutoModelForCausalLM

    if dtype == torch.bfloat16 and not torch.ops.mkldnn._is_mkldnn_bf16_supported():
        pytest.skip("this CPU has no oneDNN bf16 kernels, so packed_linears leaves a bf16 model alone")
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=dtype).eval()
    ids, mask = _batch()
    with torch.no_grad():
        plain = model(input_ids=ids, attention_mask=mask).logits.float()
        with packed_linears(model, 2):
            with packed_linears(model, 2):  # nested: shares the outer copies
                inner = model(input_ids=ids, attention_mask=mask).logits.float()
            assert model._packed_users == 1 and "forward" in model.lm_head.__dict__
            packed = model(input_ids=ids, attention_mask=mask).logits.float()
    tol = 1e-5 if dtype == torch.float32 else 2e-2
    assert (plain - packed)[mask.bool()].abs().max() <= tol and torch.equal(inner, packed)
    assert model._packed_users == 0
    assert not any({"forward", "_unpacked_forward"} & set(m.__dict__) for m in model.modules())


def test_a_forward_that_needs_weight_gradients_does_not_read_the_packed_copy(tiny_model_dir):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    ids, mask = _batch()
    with packed_linears(model, 2):
        model(input_ids=ids, attention_mask=mask).logits.sum().backward()
    assert model.model.layers[0].mlp.down_proj.weight.grad.abs().sum() > 0


def test_the_rollout_decode_samples_the_same_tokens_with_packed_weights(tiny_model_dir):
    from transformers import AutoModelForCausalLM

    from training.kernels.logprobs import without_eos
    from training.sampling import decode

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir).eval()
    ids, mask = _batch()
    cfg = SimpleNamespace(max_new_tokens=6, min_new_tokens=6, temperature=1.0, top_k=0, top_p=1.0)
    torch.manual_seed(3)
    packed, logprobs = decode.sample(model, ids, mask, cfg, eos_id=2, pad_id=1, want_logprobs=True)
    torch.manual_seed(3)
    tokens, plain = [], []
    for t, (token, logits) in enumerate(decode.decode_steps(model, ids, mask, cfg, 2, 1)):  # unpacked weights
        tokens.append(token)
        if t < cfg.min_new_tokens - 1:  # EOS held back: read under the distribution sampled from
            logits = without_eos(logits, 2)
        plain.append(logits.gather(1, token[:, None]).squeeze(1) - logits.logsumexp(-1))
    assert torch.equal(packed, torch.stack(tokens, 1))
    assert (logprobs - torch.stack(plain, 1)).abs().max() < 1e-5
    assert not any("forward" in m.__dict__ for m in model.modules())


def test_a_frozen_layer_inside_the_with_still_passes_gradients_to_its_input(tiny_model_dir):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    model.requires_grad_(False)  # LoRA's base layers: frozen weights, a gradient wanted below them
    ids, mask = _batch()
    embeds = model.get_input_embeddings()(ids).detach().requires_grad_()
    model(inputs_embeds=embeds, attention_mask=mask).logits.sum().backward()
    plain, embeds.grad = embeds.grad.clone(), None
    with packed_linears(model, 2):
        model(inputs_embeds=embeds, attention_mask=mask).logits.sum().backward()
    assert (embeds.grad - plain).abs().max() < 1e-4 * plain.abs().max()


def test_a_pack_that_fails_part_way_changes_no_layer(tiny_model_dir, monkeypatch):
    from transformers import AutoModelForCausalLM

    from training.kernels import linear

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    calls = []

    def failing(weight, rows):
        calls.append(weight)
        if len(calls) == 3:
            raise MemoryError("no room for the packed copy")
        return weight

    monkeypatch.setattr(linear, "_pack", failing)
    with pytest.raises(MemoryError), packed_linears(model, 2):
        pass
    assert len(calls) == 3 and getattr(model, "_packed_users", 0) == 0
    assert not any({"forward", "_unpacked_forward"} & set(m.__dict__) for m in model.modules())
