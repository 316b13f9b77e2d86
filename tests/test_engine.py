"""training/engine.py::deepspeed_engine: a lone rank at ZeRO 0 skips DeepSpeed's gradient all-reduce (an identity
over one rank that flattens and copies every gradient) and still trains exactly as plain torch does; a bf16 model
at ZeRO 0 takes training/kernels/mixed_step.py's lean step and gets DeepSpeed's own numbers."""

import json
from pathlib import Path

import pytest
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
    results |= _bf16_steps()
    torch.distributed.destroy_process_group()
    with open(out, "w") as f:
        json.dump(results, f)


def _bf16_steps() -> dict:
    """bf16 at ZeRO 0, DeepSpeed's own optimizer step against training/kernels/mixed_step.py's lean one: targets x10 so
    the gradient norm exceeds the clip, and an inf input at the fourth step, which must be skipped."""
    import deepspeed

    from training.engine import deepspeed_engine, ds_config
    from training.kernels.mixed_step import _step

    results = {}
    for lean in (False, True):
        model = _model().to(torch.bfloat16)
        opt = torch.optim.AdamW(model.parameters(), lr=0.1, weight_decay=0.01, fused=True)
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda _: 1.0)
        config = ds_config(4, 1, 0, "bf16")
        if lean:
            engine = deepspeed_engine(model, opt, sched, config)
        else:
            engine = deepspeed.initialize(model=model, optimizer=opt, lr_scheduler=sched, config=config)[0]
        norms, weights = [], []
        for i, (x, y) in enumerate(_batches()):
            if i == 3:
                x = x.clone()
                x[0, 0] = float("inf")
            engine.backward(torch.nn.functional.mse_loss(engine(x.to(torch.bfloat16)).float(), y * 10))
            engine.step()
            norms.append(engine.get_global_grad_norm())
            weights.append([v for p in engine.module.parameters() for v in p.detach().float().flatten().tolist()])
        installed = getattr(engine.optimizer.step, "__func__", None) is _step
        skipped = engine.skipped_steps
        results[f"step/{lean}"] = {"norms": norms, "weights": weights, "skipped": skipped, "lean": installed}
    return results


@pytest.mark.integration
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
    # the lean bf16 step: DeepSpeed's own numbers, bit for bit, clip and skipped step included
    own, lean = got["step/False"], got["step/True"]
    assert lean["lean"] is True and own["lean"] is False
    assert lean["norms"] == own["norms"] and min(lean["norms"][:3]) > 1.0  # clipped
    assert lean["norms"][3] == float("inf") and lean["skipped"] == own["skipped"] == 1
    assert lean["weights"] == own["weights"]
    assert lean["weights"][3] == lean["weights"][2] != lean["weights"][4]  # the inf step changed nothing


def test_lean_step_parts_by_hand():
    from training.kernels.mixed_step import chunks, clip_divisor, grad_norm

    assert grad_norm([torch.tensor([3.0, 4.0], dtype=torch.bfloat16), torch.tensor([12.0])]) == 13.0
    assert grad_norm([torch.tensor([1.0, float("inf")])]) == float("inf")
    assert grad_norm([torch.tensor([float("nan")])]) == float("inf")
    assert clip_divisor(3.0, 1.0) == 3.000001  # (3 + 1e-6) / 1
    assert clip_divisor(0.5, 1.0) == 1.0  # under the clip: only the loss scale
    assert clip_divisor(8.0, 1.0, loss_scale=4.0) == (2.0 + 1e-6) * 4.0
    assert clip_divisor(8.0, 0.0) == 1.0  # no clipping configured
    assert chunks([2, 2, 1, 5], 5) == [[0, 1, 2], [3]]
    assert chunks([3, 5, 2, 4], 5) == [[0], [1], [2], [3]]
    assert chunks([], 5) == []


def _model_weights() -> list[float]:
    return [v for p in _model().parameters() for v in p.detach().flatten().tolist()]


class _Engine:
    """What save_checkpoint asks of a DeepSpeed engine: it writes each rank's files of a tag."""

    def __init__(self, rank: int = 0):
        self.global_rank, self.asked = rank, []

    def save_checkpoint(self, folder, tag, save_latest=True, **kwargs):
        self.asked.append(save_latest)
        (Path(folder) / tag).mkdir(parents=True, exist_ok=True)
        (Path(folder) / tag / f"mp_rank_0{self.global_rank}_model_states.pt").write_bytes(b"states")


def test_latest_names_a_tag_only_once_its_files_are_written_and_is_never_half_written(tmp_path, monkeypatch):
    """`latest` is written aside and renamed over the old one after the tag's files (DeepSpeed truncates it first:
    a kill -9 in between left it empty and the resume failed); only rank 0 writes it."""
    import os

    from training.engine import save_checkpoint

    engine = _Engine()
    save_checkpoint(engine, tmp_path, "step2", client_state={"micro_step": 2})
    assert (tmp_path / "latest").read_text() == "step2" and engine.asked == [False]

    def killed(*args):
        raise KeyboardInterrupt("killed before the rename")

    monkeypatch.setattr(os, "replace", killed)
    with pytest.raises(KeyboardInterrupt):
        save_checkpoint(engine, tmp_path, "step4")
    assert (tmp_path / "latest").read_text() == "step2"  # the old name, whole: the resume starts at step 2
    monkeypatch.undo()
    save_checkpoint(_Engine(rank=1), tmp_path, "step6")
    assert (tmp_path / "latest").read_text() == "step2"  # rank 1 wrote its files and left `latest` to rank 0
    save_checkpoint(engine, tmp_path, "step6")
    assert (tmp_path / "latest").read_text() == "step6"


def test_a_whole_new_checkpoint_removes_the_older_ones_and_nothing_else(tmp_path):
    """A resume reads only `latest`: once rank 0 has named a new tag, the older stepN tags go (1.8 GB each for
    SmolLM2 with its optimizer); a later one and a folder that is not a tag stay."""
    from training.engine import drop_older, save_checkpoint

    (tmp_path / "actor-step2").mkdir()  # not a tag (an evaluated checkpoint's name)
    save_checkpoint(_Engine(), tmp_path, "step2")
    save_checkpoint(_Engine(), tmp_path, "step4")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["actor-step2", "latest", "step4"]
    save_checkpoint(_Engine(rank=1), tmp_path, "step6")  # rank 1 removes nothing (and names nothing)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["actor-step2", "latest", "step4", "step6"]
    save_checkpoint(_Engine(), tmp_path, "step6")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["actor-step2", "latest", "step6"]
    (tmp_path / "ref-step4.pt").write_bytes(b"x")  # a trainer's own state files beside the tags (PPO's)
    (tmp_path / "ref-step6.pt").write_bytes(b"x")
    drop_older(tmp_path, "step6", prefix="ref-", suffix=".pt")
    assert sorted(p.name for p in tmp_path.glob("ref-*")) == ["ref-step6.pt"]
