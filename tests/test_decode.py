"""training/kernels/llama_step.py: the decode's own Llama steps give transformers' logits, step by step, and the
decode falls back to transformers' forward for what they do not cover."""

import pytest
import torch

from training.kernels.llama_step import LlamaSteps, covers
from training.sampling.decode import _Steps


def _prompts():
    ids = torch.randint(3, 100, (3, 7), generator=torch.Generator().manual_seed(4))
    mask = torch.ones_like(ids)
    mask[1, :2] = 0  # left padding
    mask[2, :5] = 0
    return ids, mask


@pytest.mark.parametrize("dtype, tol", [(torch.float32, 1e-5), (torch.bfloat16, 3e-2)])
def test_llama_steps_give_transformers_logits_at_every_step(tiny_model_dir, dtype, tol):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=dtype).eval()  # GQA: 4 heads, 2 kv heads
    assert covers(model)
    ids, mask = _prompts()
    tokens = torch.randint(3, 100, (6, 3), generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        ours, theirs = LlamaSteps(model, ids, mask, 6), _Steps(model, ids, mask, 6)
        pairs = [(ours.first, theirs.first)]
        pairs += [(ours.step(tokens[t], t), theirs.step(tokens[t], t)) for t in range(5)]
        # and the whole sequence in one forward: its last position is the last step's
        full_ids = torch.cat([ids, tokens[:5].T], 1)
        full_mask = torch.cat([mask, torch.ones(3, 5, dtype=mask.dtype)], 1)
        from training.kernels.logprobs import position_ids

        whole = model(input_ids=full_ids, attention_mask=full_mask, position_ids=position_ids(full_mask)).logits
    for a, b in pairs:
        assert a.shape == (3, model.config.vocab_size) and (a.float() - b.float()).abs().max() <= tol
    assert (pairs[-1][0].float() - whole[:, -1].float()).abs().max() <= tol


def test_what_the_llama_steps_do_not_cover_takes_transformers_forward(tiny_model_dir):
    from transformers import AutoModelForCausalLM, GPT2Config, GPT2LMHeadModel

    gpt2 = GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=16, n_head=2, vocab_size=50, n_positions=32))
    assert not covers(gpt2)
    llama = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    llama.lm_head.weight.ds_id = 0  # how ZeRO-3 marks a partitioned parameter
    assert not covers(llama)


def test_the_prompt_pass_runs_sdpa_for_a_model_loaded_with_the_trainers_kernel(tiny_model_dir):
    """The sampler must not round as the scoring forward does (training/sampling/decode.py's docstring): the decode's
    first logits are an SDPA forward's, bit for bit, and the model keeps the trainers' kernel afterwards."""
    from types import SimpleNamespace

    from transformers import AutoModelForCausalLM

    from training.kernels.logprobs import position_ids
    from training.models import training_attention
    from training.sampling.decode import decode_steps

    def load(**kernel):
        return AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.bfloat16, **kernel).eval()

    trained, sdpa = load(**training_attention()), load(attn_implementation="sdpa")
    assert trained.config._attn_implementation == "lean"
    ids, mask = _prompts()
    cfg = SimpleNamespace(max_new_tokens=2, min_new_tokens=0, temperature=1.0, top_k=0, top_p=1.0)
    with torch.no_grad():
        _, first = next(decode_steps(trained, ids, mask, cfg, eos_id=2, pad_id=0))
        kw = dict(input_ids=ids, attention_mask=mask, position_ids=position_ids(mask), logits_to_keep=1)
        expected, own = sdpa(**kw).logits[:, -1], trained(**kw).logits[:, -1]
    assert torch.equal(first, expected.float())
    assert not torch.equal(own, expected)  # the two kernels do round differently here
    assert trained.config._attn_implementation == "lean"
