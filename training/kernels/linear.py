"""Linear layers through oneDNN on a CPU.

torch runs an fp32 nn.Linear on a CPU through MKL's sgemm, and MKL takes a slow path on CPUs it does not
recognise: on this machine's AMD EPYC, SmolLM2-135M's MLP shapes (1,024 tokens) ran at 230 GFLOP/s through MKL
and at 540 through oneDNN, the library torch already uses for bf16 matmuls. Both are IEEE fp32 (relative error
about 1e-6 against fp64). Two uses:

- `onednn_linears(model)`: an fp32 model's linear layers run forward and backward through oneDNN (the backward's
  two products too). bf16 models are left alone: torch already sends their matmuls to oneDNN.
- `packed_linears(model, rows)`: for a no-grad stretch (the rollout's decode), every linear layer's weight is
  reordered once into oneDNN's blocked layout; the decode then reads each weight at memory speed (at 8 rows, the
  forward's linear layers took 16.5 ms a token in bf16 unpacked against 8.6 packed, and 51 against 15 in fp32).
  The packed copies live only inside the `with`.

Both change kernels, not math: the same products, rounded by another library."""

from __future__ import annotations

import contextlib
import threading

import torch


def _linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """x @ weight.T + bias through oneDNN; weight (out, in), plain or packed by `_pack`."""
    return torch.ops.mkldnn._linear_pointwise(x, weight, bias, "none", [], "")


def onednn_usable(device: torch.device | str = "cpu") -> bool:
    """oneDNN is in this torch build and the device is a CPU."""
    return torch.device(device).type == "cpu" and torch.backends.mkldnn.is_available()


class _OneDNNLinear(torch.autograd.Function):
    """y = x W^T + b with all three products (forward, input gradient, weight gradient) through oneDNN."""

    @staticmethod
    def forward(ctx, x, weight, bias):
        ctx.save_for_backward(x, weight)
        ctx.has_bias = bias is not None
        return _linear(x, weight, bias)

    @staticmethod
    def backward(ctx, grad):
        x, weight = ctx.saved_tensors
        g = grad.reshape(-1, grad.shape[-1])
        grad_x = grad_w = grad_b = None
        if ctx.needs_input_grad[0]:
            grad_x = _linear(g, weight.t(), None).view(*grad.shape[:-1], weight.shape[1])
        if ctx.needs_input_grad[1]:
            grad_w = _linear(g.t(), x.reshape(-1, x.shape[-1]).t(), None)
        if ctx.has_bias and ctx.needs_input_grad[2]:
            grad_b = g.sum(0)
        return grad_x, grad_w, grad_b


def _onednn_forward(module: torch.nn.Linear, x: torch.Tensor) -> torch.Tensor:
    w = module.weight
    if x.dtype != torch.float32 or x.device.type != "cpu" or w.dtype != torch.float32 or hasattr(w, "ds_id"):
        return torch.nn.functional.linear(x, w, module.bias)  # ZeRO-3 (ds_id) gathers and frees it around F.linear
    if _needs_grad(module, x):
        return _OneDNNLinear.apply(x, w, module.bias)
    return _linear(x, w, module.bias)


def _needs_grad(module: torch.nn.Linear, x: torch.Tensor) -> bool:
    """This forward's graph is kept: the input, the weight or the bias wants a gradient."""
    if not torch.is_grad_enabled():
        return False
    return x.requires_grad or module.weight.requires_grad or (module.bias is not None and module.bias.requires_grad)


def _linears(model) -> list[torch.nn.Linear]:
    return [m for m in model.modules() if type(m) is torch.nn.Linear]


def onednn_linears(model):
    """`model` with each fp32 nn.Linear's forward through oneDNN (an instance attribute: the class, the weights and
    a saved model are unchanged). A no-op unless oneDNN is usable and the model is fp32 on a machine without a GPU
    (the trainers move their models to the GPU when there is one)."""
    first = next(model.parameters(), None)
    if first is None or first.dtype != torch.float32 or not onednn_usable(first.device) or torch.cuda.is_available():
        return model
    for m in _linears(model):
        m.forward = _onednn_forward.__get__(m)
    return model


def _pack(weight: torch.Tensor, rows: int) -> torch.Tensor:
    return torch.ops.mkldnn._reorder_linear_weight(weight.detach(), rows)


def _packed_forward(module: torch.nn.Linear, packed: torch.Tensor, unpacked):
    """A forward reading `packed` (captured here, so a call in flight keeps its copy alive); a forward that keeps
    a graph goes through the layer's own forward instead (oneDNN's op has no gradient)."""

    def forward(x: torch.Tensor) -> torch.Tensor:
        if _needs_grad(module, x):
            return unpacked(x)
        return _linear(x, packed, module.bias)

    return forward


def _packable(layers: list) -> bool:
    """oneDNN can pack all of these weights here: plain (not ZeRO-3's partitions) CPU tensors, and bf16 only where
    the CPU has oneDNN's bf16 kernels (without them the reorder raises)."""
    if not layers or not onednn_usable(layers[0].weight.device):
        return False
    if any(hasattr(m.weight, "ds_id") or m.weight.device.type != "cpu" for m in layers):
        return False
    bf16 = any(m.weight.dtype == torch.bfloat16 for m in layers)
    return not bf16 or torch.ops.mkldnn._is_mkldnn_bf16_supported()


_lock = threading.Lock()


@contextlib.contextmanager
def packed_linears(model, rows: int):
    """Inside the `with`, forwards of `model` read each linear layer's weight from a copy packed for about `rows`
    rows (oneDNN's hint; any row count is correct). Nested or concurrent uses on one model share the first one's
    copies, which go when the last use ends (count uses through one object: the model, not also its wrapper). A
    no-op where `_packable` says no, and for dtypes other than fp32 and bf16."""
    layers = [m for m in _linears(model) if m.weight.dtype in (torch.float32, torch.bfloat16)]
    if not _packable(layers):
        yield model
        return
    with _lock:
        users = getattr(model, "_packed_users", 0)
        if users == 0:
            with torch.no_grad():
                packed = [_pack(m.weight, rows) for m in layers]  # all packed before any layer changes
            for m, weight in zip(layers, packed, strict=True):
                m._unpacked_forward = m.__dict__.get("forward")
                m.forward = _packed_forward(m, weight, m._unpacked_forward or m.__class__.forward.__get__(m))
        model._packed_users = users + 1
    try:
        yield model
    finally:
        with _lock:
            model._packed_users -= 1
            if model._packed_users == 0:
                for m in layers:
                    forward = m.__dict__.pop("_unpacked_forward", None)
                    if forward is None:
                        m.__dict__.pop("forward", None)
                    else:
                        m.forward = forward
