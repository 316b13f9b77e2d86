"""training/engine.py::deepspeed_engine: a lone rank at ZeRO 0 skips DeepSpeed's gradient all-reduce (an identity
over one rank that flattens and copies every gradient) and still trains exactly as plain torch does."""

import json

import torch


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))


def _batches() -> list[tuple[torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(1)
    return [(torch.randn(4, 6, generator=g), torch.randn(4, 1, generator=g)) for _ in range(6)]


def _plain_torch(accum: int) -> list[float]:
    """Three optimizer steps of AdamW with the loss averaged over `accum` micro-batches and gradients clipped to
    norm 1.0, as the DeepSpeed config asks."""
    model = _model()
    opt = torch.optim.AdamW(model.parameters(), lr=0.1, weight_decay=0.0)
    for i, (x, y) in enumerate(_batches()):
        (torch.nn.functional.mse_loss(model(x), y) / accum).backward()
        if (i + 1) % accum == 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            opt.zero_grad()
    return [v for p in model.parameters() for v in p.detach().flatten().tolist()]


def _train_on_rank(rank: int, init: str, out: str) -> None:
    import os

    from training.engine import deepspeed_engine, ds_config

    os.environ.update(LOCAL_RANK="0", RANK="0", WORLD_SIZE="1")
    torch.distributed.init_process_group("gloo", init_method=init, rank=0, world_size=1)
    results = {}
    for stage, accum in ((0, 1), (0, 2), (1, 2)):
        model = _model()
        opt = torch.optim.AdamW(model.parameters(), lr=0.1, weight_decay=0.0, fused=True)
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda _: 1.0)
        config = {**ds_config(4, accum, stage, "fp32"), "zero_allow_untested_optimizer": True}
        engine = deepspeed_engine(model, opt, sched, config)
        for x, y in _batches():
            engine.backward(torch.nn.functional.mse_loss(engine(x), y))
            engine.step()
        weights = [v for p in engine.module.parameters() for v in p.detach().flatten().tolist()]
        results[f"{stage}/{accum}"] = {"allreduce": engine.enable_backward_allreduce, "weights": weights}
    for allreduce in (False, True):  # bf16 (DeepSpeed's bf16 optimizer): the skip changes nothing either
        model = _model().to(torch.bfloat16)
        opt = torch.optim.AdamW(model.parameters(), lr=0.1, weight_decay=0.0, fused=True)
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda _: 1.0)
        engine = deepspeed_engine(model, opt, sched, ds_config(4, 2, 0, "bf16"))
        engine.enable_backward_allreduce = allreduce
        for x, y in _batches():
            pred = engine(x.to(torch.bfloat16)).float()
            engine.backward(torch.nn.functional.mse_loss(pred, y))
            engine.step()
        weights = [v for p in engine.module.parameters() for v in p.detach().float().flatten().tolist()]
        results[f"bf16/{allreduce}"] = {"weights": weights}
    torch.distributed.destroy_process_group()
    with open(out, "w") as f:
        json.dump(results, f)


def test_a_lone_rank_skips_the_allreduce_and_trains_as_plain_torch(tmp_path):
    import torch.multiprocessing as mp

    out = str(tmp_path / "out.json")
    mp.spawn(_train_on_rank, args=(f"file://{tmp_path}/rendezvous", out), nprocs=1)
    got = json.loads(open(out).read())
    assert got["0/1"]["allreduce"] is False and got["0/2"]["allreduce"] is False
    assert got["1/2"]["allreduce"] is True  # ZeRO 1 moves the gradients into its partitions there
    for key, accum in (("0/1", 1), ("0/2", 2), ("1/2", 2)):
        expected = _plain_torch(accum)
        assert got[key]["weights"] != _model_weights()  # three steps moved them
        assert max(abs(a - b) for a, b in zip(got[key]["weights"], expected, strict=True)) < 1e-6, key
    assert got["bf16/False"]["weights"] == got["bf16/True"]["weights"] != _model_weights()


def _model_weights() -> list[float]:
    return [v for p in _model().parameters() for v in p.detach().flatten().tolist()]
