"""training/sampling/rollout_engine.py's weights: what vLLM is sent is the actor as a plain transformers checkpoint,
LoRA merged in exactly as PEFT merges it."""

import copy

import torch

from training.sampling.rollout_engine import actor_weights


def test_a_plain_actor_is_sent_by_its_own_names_once(tiny_model_dir):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    sent = actor_weights(model)
    assert set(sent) == {n for n, _ in model.named_parameters()}  # the tied head once, as embed_tokens
    assert "lm_head.weight" not in sent
    for name, p in model.named_parameters():
        assert torch.equal(sent[name], p.detach()) and sent[name].data_ptr() != p.data_ptr()  # a copy


def test_a_lora_actor_is_sent_merged_as_peft_merges_it(tiny_model_dir):
    from transformers import AutoModelForCausalLM

    from training.models import add_lora

    model = add_lora(AutoModelForCausalLM.from_pretrained(tiny_model_dir), rank=4, alpha=8.0, causal=True)
    torch.manual_seed(0)
    with torch.no_grad():  # B starts at zero (the merge would be the base): give the adapters something to add
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.1)
    sent = actor_weights(model)
    merged = copy.deepcopy(model).merge_and_unload()
    expected = {n: p.detach() for n, p in merged.named_parameters()}
    assert set(sent) == set(expected)
    for name, tensor in expected.items():
        assert torch.allclose(sent[name], tensor, atol=1e-6), name
    q = "model.layers.0.self_attn.q_proj.weight"
    assert not torch.allclose(sent[q], model.get_base_model().model.layers[0].self_attn.q_proj.base_layer.weight)
