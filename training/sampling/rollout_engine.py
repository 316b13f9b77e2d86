"""Rollouts from vLLM beside the DeepSpeed actor (OpenRLHF's hybrid engine, TRL's colocate mode): each rank holds an
engine over the actor's starting folder, and before it samples, the actor's weights after its latest update reach
the engine. The trainer still reads the old log-probs with its own forward (training/rollouts/rollout.py's score), so
the engine only picks the tokens.

How the weights travel, per step: the actor's parameters by their transformers names (LoRA merged into its base
weights; under ZeRO-3 gathered once, not once per decoded token), written to one safetensors file in shared memory
and reloaded by the engine's worker in place (training/sampling/vllm_engine.py). The step's clock names the cost
("weight_sync")."""

from __future__ import annotations

import contextlib

import torch

from training.sampling.vllm_engine import Settings, VllmEngine


def _gathered(module, zero3: bool):
    if not zero3:
        return contextlib.nullcontext()
    import deepspeed

    return deepspeed.zero.GatheredParameters(list(module.parameters()), modifier_rank=None)


def actor_weights(module, zero3: bool = False) -> dict[str, torch.Tensor]:
    """The actor's weights as a transformers checkpoint names them, copied to the CPU: a PEFT actor's LoRA deltas
    merged into their base weights (vLLM serves the merged model), under ZeRO-3 every shard gathered once."""
    with _gathered(module, zero3), torch.no_grad():
        if not hasattr(module, "peft_config"):
            return {name: p.detach().to("cpu", copy=True) for name, p in module.named_parameters()}
        return _merged_lora(module)


def _merged_lora(model) -> dict[str, torch.Tensor]:
    from peft.tuners.lora import LoraLayer

    out = {}
    adapter = model.active_adapter if isinstance(model.active_adapter, str) else model.active_adapter[0]
    base = model.get_base_model()
    for module_name, module in base.named_modules():
        if isinstance(module, LoraLayer):
            weight = module.base_layer.weight
            merged = weight.detach().float() + module.get_delta_weight(adapter).float()
            out[f"{module_name}.weight"] = merged.to(weight.dtype).cpu()
            if module.base_layer.bias is not None:
                out[f"{module_name}.bias"] = module.base_layer.bias.detach().cpu()
    for name, p in base.named_parameters():
        if "lora_" in name or ".base_layer." in name:
            continue
        out.setdefault(name, p.detach().to("cpu", copy=True))
    return out


# A gap no rounding makes: on a real prompt, bf16 kernels that differ leave hundredths of a nat (0.08 on
# SmolLM2-135M); stale weights after many steps, more. (Not on made-up token ids: after a run of special tokens the
# same bf16 weights gave gaps of 2.7 nats, fp32 none.)
MAX_GAP = 1.0


@torch.no_grad()
def logprob_gap(engine: VllmEngine, model, prompt: list[int], k: int = 5) -> float:
    """The largest difference between the engine's next-token log-probs after `prompt` (a real prompt: its k most
    likely tokens) and `model`'s own forward: 0 up to float rounding when the engine holds the model's weights."""
    theirs = engine.next_logprobs(prompt, k)
    ids = torch.tensor([prompt], device=next(model.parameters()).device)
    ours = model(input_ids=ids).logits[0, -1].float().log_softmax(-1)
    return max(abs(lp - float(ours[t])) for t, lp in theirs.items())


class EngineRollouts:
    """A trainer's vLLM engine and the actor version it holds. `engine_for(actor, probe)` returns the engine after
    sending the actor's weights if they changed since the last call (its optimizer steps are the version), and
    checks the sync: the engine's next-token log-probs against the actor's own forward (`take()` reports it)."""

    def __init__(self, folder, dtype: str, eos_id: int, max_len: int, seed: int, zero3: bool, clock=None):
        # in processes of its own: vLLM in the rank's process would take DeepSpeed's group and tear it down at close
        self.engine = VllmEngine(folder, dtype, [eos_id], max_len, seed, only_eos=True, in_process=False)
        self.zero3, self.clock = zero3, clock
        self.version: int | None = None
        self.synced: dict = {}

    def engine_for(self, actor, probe: list[int]) -> VllmEngine:
        """actor: the DeepSpeed engine (its global_steps counts optimizer steps); probe: a prompt's token ids, the
        sync's check (a rollout prompt: on made-up ids bf16 rounding alone differs by nats)."""
        version = actor.global_steps
        if version != self.version:
            part = self.clock.part("weight_sync") if self.clock is not None else contextlib.nullcontext()
            with part:
                sent = self.engine.load_weights(actor_weights(actor.module, self.zero3))
            gap = logprob_gap(self.engine, actor.module, probe)
            if gap > MAX_GAP:
                raise RuntimeError(
                    f"the vLLM engine's log-probs differ from the actor's by {gap:.2f} nats after a "
                    "weight sync: its weights did not arrive (rollout/engine_logprob_gap)"
                )
            self.synced = {"rollout/weight_sync_mb": sent / 2**20, "rollout/engine_logprob_gap": gap}
            self.version = version
        return self.engine

    def take(self) -> dict:
        """The last sync's size and check, once (a step's metrics)."""
        out, self.synced = self.synced, {}
        return out

    def close(self) -> None:
        self.engine.close()


def engine_response(engine: VllmEngine, prompts: list[list[int]], cfg, eos_id: int, pad_id: int) -> torch.Tensor:
    """(B, T) responses sampled by the engine, pad after EOS; T is the longest. EOS is held back at the first
    min_new_tokens - 1 positions, as the trainers' own decode holds it (training/kernels/logprobs.py's held_eos). The
    seed is drawn from torch's generator, which seed_rollout set: a resumed run samples what the first one would."""
    seed = int(torch.randint(0, 2**31 - 1, (1,)))
    settings = Settings(cfg.temperature, cfg.top_p, cfg.top_k, cfg.max_new_tokens, max(0, cfg.min_new_tokens - 1))
    outs = [row[0] for row in engine.sample(prompts, 1, settings, seed)]
    width = max(1, max(len(o.token_ids) for o in outs))
    response = torch.full((len(prompts), width), pad_id, dtype=torch.long)
    for i, o in enumerate(outs):
        ids = o.token_ids
        if eos_id in ids:
            ids = ids[: ids.index(eos_id) + 1]
        response[i, : len(ids)] = torch.tensor(ids, dtype=torch.long)
    return response
