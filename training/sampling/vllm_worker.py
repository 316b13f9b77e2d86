"""Runs inside vLLM's worker (LLM(worker_extension_cls=...), in its process or the owner's): the weight reload that
training/sampling/vllm_engine.py's load_weights asks for. Imports nothing of rlhf-studio's."""

from __future__ import annotations


class WeightSync:
    """Mixed into vLLM's worker; `self.model_runner` is the worker's."""

    def rlhf_load_weights(self, path: str) -> int:
        """Load the safetensors file at `path` into the model in place; returns the tensors read."""
        from safetensors.torch import load_file

        tensors = load_file(path)
        # the worker's reload_weights: the model runner's, inside vLLM's config context
        self.reload_weights(weights_iterator=iter(tensors.items()), is_checkpoint_format=True)
        _repack_cpu_heads(self.model_runner.model)
        return len(tensors)


def _repack_cpu_heads(model) -> None:
    """On a CPU vLLM packs the output head's weight for oneDNN when it loads (the embedding keeps its plain copy)
    and the reload does not pack it again: a tied or untied head would go on computing with the old weights."""
    from vllm.model_executor.layers.utils import dispatch_cpu_unquantized_gemm
    from vllm.model_executor.layers.vocab_parallel_embedding import VocabParallelEmbedding

    for module in model.modules():
        if isinstance(module, VocabParallelEmbedding) and hasattr(module, "cpu_linear"):
            dispatch_cpu_unquantized_gemm(module, remove_weight=False)
