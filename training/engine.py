"""DeepSpeed plumbing shared by the reward-model and PPO trainers: process-group setup, the learning-rate
schedule, and saving an engine's model as a plain Hugging Face folder."""

from __future__ import annotations

import errno
import gc
import itertools
import math
import os
import shutil
import sys
import time
from pathlib import Path

import torch

from training.precision import with_resolved_dtype
from training.runs import write_text_atomic


def use_local_extensions_dir() -> Path:
    """DeepSpeed JIT-builds its CPU communication op through torch's extension builder, which keeps the build
    under ~/.cache/torch_extensions behind a lock file that it waits on forever. A build killed half-way leaves
    that lock behind for every later checkout of the machine; one folder per environment (inside the venv) keeps
    a stale lock to the environment that left it, and a fresh install builds afresh."""
    return Path(os.environ.setdefault("TORCH_EXTENSIONS_DIR", str(Path(sys.prefix) / "torch_extensions")))


def build_cpu_ops() -> None:
    """Build DeepSpeed's CPU communication op now (`make` calls this at install time), not inside the first run."""
    folder = use_local_extensions_dir()
    for lock in folder.glob("*/lock"):  # nothing else builds during the install: a lock here is a dead build's
        lock.unlink()
    from deepspeed.ops.op_builder.cpu import ShareMemCommBuilder

    ShareMemCommBuilder().load()
    print(f"DeepSpeed's CPU communication op is built in {folder}")


CONNECT_TIMEOUT_S = 120.0  # how long a rank waits for the others at the start ($RLHF_CONNECT_TIMEOUT)
STEP_TIMEOUT_S = 1800.0  # how long a collective may wait afterwards (torch's default for gloo)


def connect_timeout() -> float:
    """Seconds a rank waits for every other rank to join (RLHF_CONNECT_TIMEOUT, else 120)."""
    try:
        return float(os.environ.get("RLHF_CONNECT_TIMEOUT", CONNECT_TIMEOUT_S))
    except ValueError:
        return CONNECT_TIMEOUT_S


def unreachable_line(env: dict, seconds: float) -> str:
    """The one line a rank fails with when the others did not join in time: which rank, the master it went through
    and what to check."""
    world = int(env.get("WORLD_SIZE", "1"))
    return (
        f"rank {env.get('RANK', '?')} of {world} waited {seconds:.0f} s for the other ranks through the master at "
        f"{env.get('MASTER_ADDR', '?')}:{env.get('MASTER_PORT', '?')}: a host is down or unreachable from there, or "
        "its rank did not start (RLHF_CONNECT_TIMEOUT sets the wait)"
    )


def setup_distributed() -> tuple[int, int]:
    """(rank, world size): gloo on CPU, the accelerator's backend (nccl) elsewhere. The ranks meet within
    `connect_timeout()` seconds, or this rank fails with one line naming the master (a host down, a wrong address:
    not a wait of torch's 30 minutes); once met, a collective may wait STEP_TIMEOUT_S."""
    import datetime as dt

    use_local_extensions_dir()
    import deepspeed
    from deepspeed.accelerator import get_accelerator

    backend = "gloo" if get_accelerator().device_name() == "cpu" else get_accelerator().communication_backend_name()
    seconds = connect_timeout()
    try:
        deepspeed.init_distributed(dist_backend=backend, timeout=dt.timedelta(seconds=seconds))
        if torch.distributed.get_world_size() > 1:
            torch.distributed.barrier()  # every rank is here: the group works, not only the store
    except (torch.distributed.DistError, TimeoutError, ConnectionError) as e:  # a store or peer that never came
        raise TimeoutError(unreachable_line(dict(os.environ), seconds)) from e
    from torch.distributed import distributed_c10d

    if hasattr(distributed_c10d, "_set_pg_timeout"):
        distributed_c10d._set_pg_timeout(dt.timedelta(seconds=STEP_TIMEOUT_S))
    rank, world = torch.distributed.get_rank(), torch.distributed.get_world_size()
    if get_accelerator().device_name() == "cpu":
        torch.distributed.barrier()  # every rank has mapped every other rank's buffer by now
        release_shm_buffer(rank)
    return rank, world


SHM_DIR = Path("/dev/shm")


def shm_buffers(port: str = "*", rank: str = "*") -> list[Path]:
    """DeepSpeed's CPU all-reduce buffers (69 MB per rank) of the process group at MASTER_PORT `port`."""
    return sorted(SHM_DIR.glob(f"deepspeed_allreduce_buffer_*_{port}_{rank}"))


def release_shm_buffer(rank: int) -> None:
    """On CPU, DeepSpeed's init maps a 69 MB /dev/shm file per rank that nothing ever removes: every run would
    leave its files in RAM until reboot (a few hundred runs fill the machine's memory). Each rank's buffer is
    opened by all ranks during init, so after a barrier its name can go; the memory is freed when the last
    process that maps it exits, however it exits."""
    port = os.environ.get("MASTER_PORT")
    for path in shm_buffers(port, str(rank)) if port else []:
        path.unlink(missing_ok=True)


def lr_lambda(warmup_steps: int, schedule: str, total_steps: int):
    """Multiplier of the peak learning rate at each optimizer step: linear warm-up, then cosine, linear or
    constant."""

    def f(step: int) -> float:
        if step < warmup_steps:
            return (step + 1) / warmup_steps
        progress = (step - warmup_steps) / max(1, total_steps - warmup_steps)
        if schedule == "cosine":
            return 0.5 * (1 + math.cos(math.pi * min(1.0, progress)))
        if schedule == "linear":
            return max(0.0, 1 - progress)
        return 1.0

    return f


def ds_config(micro_batch: int, grad_accum: int, zero_stage: int, dtype: str) -> dict:
    return {
        "train_micro_batch_size_per_gpu": micro_batch,
        "gradient_accumulation_steps": grad_accum,
        "gradient_clipping": 1.0,
        "zero_optimization": {"stage": zero_stage},
        "bf16": {"enabled": dtype == "bf16"},
        "fp16": {"enabled": dtype == "fp16"},
        "steps_per_print": 10**9,
    }


def save_hf(engine, model, tokenizer, out: Path, rank: int, zero3: bool, lora: bool, keep: bool = False) -> None:
    """`model` (the HF model inside the engine) as a plain HF folder (safetensors + tokenizer): gathered from
    all ranks under ZeRO-3, LoRA adapters merged into the weights, so any tool loads it as a plain model.
    keep=True (a checkpoint in the middle of a run): LoRA is merged into a copy, the training model keeps its
    adapters."""
    if lora:  # (ZeRO-3 with LoRA is refused by the configs)
        if rank == 0:
            if keep:
                import copy

                model = copy.deepcopy(model)
            merged = model.merge_and_unload() if hasattr(model, "merge_and_unload") else model
            merged.save_pretrained(out, safe_serialization=True)
            tokenizer.save_pretrained(out)
        return
    state = engine._zero3_consolidated_16bit_state_dict() if zero3 else None  # collective: every rank calls it
    if rank == 0:
        model.save_pretrained(out, state_dict=state, safe_serialization=True)
        tokenizer.save_pretrained(out)


def save_checkpoint(engine, folder: str | Path, tag: str, drop: bool = True, **kwargs) -> None:
    """engine.save_checkpoint, all or nothing: a save that fails part-way (a full disk) removes its half-written tag
    folder, so `latest` still names a whole checkpoint and the space is free again for the run's log and status; a
    full disk is said in so many words (torch reports it as an iostream error). `latest` is ours to write (see
    mark_latest), never DeepSpeed's. drop: then remove the older tags (drop_older); a checkpoint of several
    engines drops them itself once its last engine is saved."""
    folder = Path(folder)
    try:
        engine.save_checkpoint(str(folder), tag=tag, save_latest=False, **kwargs)  # every rank has written its part
        if engine.global_rank == 0:
            mark_latest(folder, tag)
            if drop:
                drop_older(folder, tag)
        return
    except Exception as e:
        full = (isinstance(e, OSError) and e.errno == errno.ENOSPC) or shutil.disk_usage(folder).free < 1 << 20
        if not full:
            _drop_unfinished(folder, tag)
            raise
    # Out of the except block: the exception's frames, which hold the half-written file open (and its space taken),
    # are gone; collect them so the space comes back when the folder is removed.
    gc.collect()
    latest = _drop_unfinished(folder, tag)
    after = f"resume continues from {latest}" if latest else "no checkpoint yet"
    raise OSError(errno.ENOSPC, f"No space left on device: checkpoint {tag} did not fit in {folder} (removed; {after})")


def mark_latest(folder: Path, tag: str) -> None:
    """Name `tag` in folder/latest once its files are on disk: fsynced, then `latest` written aside and renamed over
    the old one. DeepSpeed truncates `latest` and then writes the tag: a kill -9 between the two (seen in make test)
    left it empty, and the resumed run failed in load_checkpoint with a bare AssertionError."""
    for path in sorted((folder / tag).rglob("*")):
        if path.is_file():
            with path.open("rb") as f:
                os.fsync(f.fileno())
    write_text_atomic(folder / "latest", tag)


def drop_older(folder: Path, tag: str, prefix: str = "", suffix: str = "") -> None:
    """Remove the resume checkpoints before `tag` (stepN, or the files prefix + stepN + suffix) once the run's
    `latest` names it: a resume reads only `latest`, and each tag of a 135M-parameter model with its optimizer is
    1.8 GB (a default-model PPO run kept five per model and filled the disk). Evaluated checkpoints (plain HF
    folders, actor-stepN) are not tags and stay."""
    step = _tag_step(tag)
    if step is None:
        return
    for old in folder.iterdir():
        if not (old.name.startswith(prefix) and old.name.endswith(suffix)):
            continue
        before = _tag_step(old.name[len(prefix) : len(old.name) - len(suffix)])
        if before is not None and before < step:
            shutil.rmtree(old, ignore_errors=True) if old.is_dir() else old.unlink(missing_ok=True)


def _tag_step(name: str) -> int | None:
    return int(name[4:]) if name.startswith("step") and name[4:].isdigit() else None


def _drop_unfinished(folder: Path, tag: str) -> str | None:
    """Remove checkpoint `tag` unless `latest` names it; returns what `latest` names."""
    latest = (folder / "latest").read_text().strip() if (folder / "latest").is_file() else None
    if latest != tag:
        shutil.rmtree(folder / tag, ignore_errors=True)
    return latest


def failure_reason(e: BaseException) -> str:
    """An exception as the one line a failed run's status shows. A lost peer in gloo ("[.../pair.cc:537] Read error
    [10.0.0.2]:44246: Connection reset by peer. This is typically ...") becomes the rank's host and what happened."""
    import re

    text = str(e).splitlines()[0] if str(e) else ""
    said = re.search(r"gloo/\S*\] (.*?)(?:\. |\.?$)", text)  # gloo's message: its first sentence
    peer = re.search(r"\[([^\]/]+)\]:\d+", said.group(1)) if said else None
    if peer:
        what = re.sub(r"\s*\[[^\]/]+\]:\d+:?\s*", " ", said.group(1)).strip()
        return f"lost the rank on {peer.group(1)}: {what} (its host went down, or its process died)"
    return f"{type(e).__name__}: {text[:300]}" if text else type(e).__name__


def run_main(config_class, train, description: str, argv: list[str] | None = None) -> None:
    """The entry point of a trainer module under the DeepSpeed launcher: `--config RUN/config.json` (plus the
    launcher's `--local_rank`); any exception marks the run failed with a one-line reason before it propagates."""
    import argparse

    from training.runs import RunFiles, read_status

    p = argparse.ArgumentParser(description=description)
    p.add_argument("--config", required=True)
    p.add_argument("--local_rank", type=int, default=-1)  # passed by the DeepSpeed launcher
    args = p.parse_args(argv)
    cfg = config_class.load(args.config)
    cfg.check()
    cfg, dtype_line = with_resolved_dtype(cfg)  # a hand-written `auto` is decided where the ranks run
    print(dtype_line, flush=True)
    try:
        train(cfg)
    except BaseException as e:
        reason = failure_reason(e)
        last = read_status(cfg.output_dir)  # keep the step it got to, so `rlhf runs` says where it stopped
        kept = {k: last[k] for k in ("step", "total_steps") if k in last}
        RunFiles(cfg.output_dir).status("failed", error=reason, **kept)
        raise


# --- the training loop of the trainers on pairs (reward model, DPO) ------------------------------------------------


def initialize(cfg, model, total: int, lr: float | None = None, micro_batch: int | None = None, grad_accum: int = 0):
    """(engine, scheduler): fused AdamW over the trainable parameters, warm-up then the configured decay over
    `total` steps, and DeepSpeed with the run's ZeRO stage and dtype. The pair trainers' lr, micro-batch and
    accumulation come from their config; PPO gives each of its two engines its own lr and its minibatch."""
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=lr or cfg.lr, weight_decay=cfg.weight_decay, fused=True)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_lambda(cfg.warmup_steps, cfg.lr_schedule, total))
    config = ds_config(micro_batch or cfg.batch_pairs, grad_accum or cfg.grad_accum, cfg.zero_stage, cfg.dtype)
    return deepspeed_engine(model, opt, sched, config), sched


def deepspeed_engine(model, opt, sched, config: dict):
    """deepspeed.initialize, without the gradient all-reduce of a lone rank at ZeRO 0. There DeepSpeed still
    flattens every gradient into one buffer, all-reduces it over a group of one, and copies it back: 0.56 s of a
    5.9 s reward-model backward (SmolLM2-135M, fp32, 24 sequences of 128 tokens), for an identity (the average over
    one rank). ZeRO 1-3 keep it: their optimizers move the gradients into their partitions there. A bf16 model at
    ZeRO 0 steps through training/kernels/mixed_step.py's lean step (DeepSpeed's math, fewer fp32 copies)."""
    use_local_extensions_dir()  # a process that set up its own process group (a test) loads the op built at install
    import deepspeed

    from training.kernels.mixed_step import lean_bf16_step

    engine = deepspeed.initialize(model=model, optimizer=opt, lr_scheduler=sched, config=config)[0]
    lean_bf16_step(engine.optimizer)
    if torch.distributed.get_world_size() == 1 and engine.zero_optimization_stage() == 0:
        engine.enable_backward_allreduce = False
    return engine


def resume_micro_step(engine, run, ckpt: Path) -> int:
    """Micro-batches already trained (0 without a checkpoint); the engine's weights, optimizer, scheduler and step
    come back from `ckpt`'s latest checkpoint."""
    if not (ckpt / "latest").exists():
        return 0
    _, client = engine.load_checkpoint(str(ckpt))
    run.metrics({"event": "resumed", "step": engine.global_steps, "micro_step": client["micro_step"]})
    return client["micro_step"]


def pair_loop(engine, run, cfg, total: int, batches_of, micro_step, step_row, evaluate=None) -> int | None:
    """Micro-batches into optimizer steps until `total` steps: each trainer gives its batches per epoch
    (`batches_of(epoch)`, deterministic, so a resumed run skips exactly what it had trained), its loss on one
    (`micro_step(batch) -> (loss, info)`), its metrics row from the step's window of (loss, info, pairs) and
    seconds (`step_row`), and its evaluation. Returns the micro-batches done, or None when a Stop ended the run
    (checkpointed, resumable)."""
    ckpt = Path(cfg.output_dir) / "checkpoints"
    done = resume_micro_step(engine, run, ckpt)
    micro, window, t0 = 0, [], time.time()
    for epoch in range(cfg.epochs) if not cfg.max_steps else itertools.count():
        for batch in batches_of(epoch):
            if engine.global_steps >= total:
                break
            micro += 1
            if micro <= done:  # already trained before the restart
                continue
            loss, info = micro_step(batch)
            engine.backward(loss)
            boundary = engine.is_gradient_accumulation_boundary()
            engine.step()
            window.append((loss.item(), info, len(batch)))
            if not boundary:
                continue
            step = engine.global_steps
            run.metrics({"step": step, "epoch": epoch, **step_row(window, time.time() - t0)})
            window, t0 = [], time.time()
            run.status("running", step=step, total_steps=total)
            if not _step_end(engine, run, cfg, step, total, micro, evaluate, ckpt):
                return None
        if engine.global_steps >= total:
            break
    return micro


def _step_end(engine, run, cfg, step: int, total: int, micro: int, evaluate, ckpt: Path) -> bool:
    """Evaluation every `eval_every` steps; a Stop checkpoints and ends the run (False); checkpoints every
    `save_every` steps."""
    from training.runs import stop_requested

    if cfg.eval_every and step % cfg.eval_every == 0 and evaluate:
        run.metrics({"step": step, **evaluate()})
    if step < total and stop_requested(cfg.output_dir, engine.device):
        save_checkpoint(engine, ckpt, f"step{step}", client_state={"micro_step": micro})
        run.metrics({"event": "stopped", "step": step})
        run.status("stopped", step=step, total_steps=total)
        return False
    if cfg.save_every and step % cfg.save_every == 0:
        save_checkpoint(engine, ckpt, f"step{step}", client_state={"micro_step": micro})
    return True


def peak_memory() -> dict:
    """This rank's peak RSS, and its peak CUDA allocation where there is a GPU, in MB (the final metrics line's)."""
    import resource

    import torch

    out = {"perf/peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}
    if torch.cuda.is_available():
        out["perf/peak_gpu_mb"] = torch.cuda.max_memory_allocated() / 2**20
    return out


def tensors_mb(tensors) -> float:
    """MB held by these tensors (each counted once, however often it appears)."""
    seen = {id(t): t for t in tensors if isinstance(t, torch.Tensor)}
    return sum(t.numel() * t.element_size() for t in seen.values()) / 2**20


def optimizer_mb(engine) -> float:
    """MB an engine's optimizer holds beyond the model: its state (AdamW's two moments) and, in bf16 or fp16, the
    fp32 master copy of the weights it updates (the parameters it steps that are not the model's own)."""
    inner = getattr(engine.optimizer, "optimizer", engine.optimizer)
    own = {id(p) for p in engine.module.parameters()}
    masters = [p for g in inner.param_groups for p in g["params"] if id(p) not in own]
    state = [t for s in inner.state.values() for t in s.values()]
    return tensors_mb(masters + state)


def finish_pairs(engine, run, cfg, micro: int, final: dict, tokenizer, output: str, rank: int) -> Path:
    """The end of a run on pairs: the final metrics line (with this rank's peak memory), the last checkpoint, and the
    model as a plain HF folder RUN/output; returns that folder (the caller adds its files, then says finished)."""
    final = {"step": engine.global_steps, **final, **peak_memory()}
    run.metrics({**final, "event": "final"})
    ckpt = Path(cfg.output_dir) / "checkpoints"
    save_checkpoint(engine, ckpt, f"step{engine.global_steps}", client_state={"micro_step": micro})
    out = Path(cfg.output_dir) / output
    save_hf(engine, engine.module, tokenizer, out, rank, cfg.zero_stage == 3, bool(cfg.lora_rank))
    return out
