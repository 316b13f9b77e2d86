"""vLLM as the engine that samples: the K responses annotators rank, best-of-N, and (training/rollouts/rollout.py) the
rollouts of the trainers on prompts, on the CPU here and on GPUs unchanged.

The engine holds one model. On a CPU its core and worker run in the process that uses it (one engine per process:
VllmEngine's in_process); a second engine beside it, any engine on a GPU and a trainer rank's run in processes of
their own (vLLM's V1 engine core and worker), so their torch.distributed groups never meet the trainer's and closing
one frees all its memory. New weights reach it through a safetensors file in shared memory
(/dev/shm where there is one): the trainer writes its tensors once, the engine's worker reads them and reloads in
place (training/sampling/vllm_worker.py). On a CPU vLLM packs the linear layers' weights for oneDNN when it loads them;
the reload repacks them.

`engine_for(model folder, choice)` says which engine samples a model and why: `vllm` where vLLM is installed and
loads the model, else `hf` (transformers' generate, training/sampling/generation.py; the trainers' own decode for
rollouts). RLHF_ENGINE=hf|vllm pins what `auto` means, as RLHF_DTYPE pins the dtype. A caller that knows its job's
size passes it (`sequences`): on a CPU, `auto` samples a job too small to pay for an engine's start with generate."""

from __future__ import annotations

import collections
import contextlib
import importlib.util
import itertools
import os
import subprocess
import tempfile
import threading
import weakref
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

ENGINES = ("auto", "vllm", "hf")
# vLLM's CPU attention kernels (vllm/v1/attention/backends/cpu_attn.py's supported head sizes)
CPU_HEAD_SIZES = (32, 64, 80, 96, 112, 128, 160, 192, 224, 256, 512)
# Architectures whose weights this file sends by their transformers names (vLLM's loader maps them)
ARCHITECTURES = ("LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM")
# The engine's KV cache on a CPU, GiB, unless VLLM_CPU_KVCACHE_SPACE says otherwise: 1 GiB holds about 46,000
# tokens of SmolLM2-135M in bf16 (30 layers x 3 KV heads x 64 x 2 x 2 bytes a token)
CPU_KV_CACHE_GB = 1
# The share of a GPU's memory the engine takes beside the trainer (TRL's colocate default after its OOM reports)
GPU_MEMORY_SHARE = 0.3
# Engines start one at a time in a process (VllmEngine.__init__): each one's watchdog notes only its own processes
_STARTING = threading.Lock()
# The engine running in this process, if one is (in_process): one at most. vLLM keeps an engine's parallel groups and
# a step's forward context in module globals, and an engine's shutdown tears the process's groups down, so a second
# engine beside it runs in processes of its own (and closing either leaves the other working)
_IN_THIS_PROCESS: weakref.WeakSet = weakref.WeakSet()
# Why `auto` picked vLLM: the one choice that falls back to hf when the engine cannot start (open_engine)
AUTO_VLLM = "auto: vLLM is installed and loads this model"
# On a CPU, the sequences (prompts x K) from which a cold engine's start pays against generate; smaller jobs under
# `auto` use generate. `python -m bench.run --only clicks` estimates it (docs/benchmarks.json: the clicks section's
# break_even_prompts x k, 2 cores here); a GPU runs every job on vLLM (not measured there).
CPU_ENGINE_PAYS_FROM = 20


class EngineError(RuntimeError):
    """vLLM was asked for (engine=vllm) and cannot sample this model: one line that says why."""


def vllm_installed() -> bool:
    return importlib.util.find_spec("vllm") is not None


def _on_gpu() -> bool:
    import torch

    return torch.cuda.is_available()


def unsupported(folder: Path, gpu: bool | None = None) -> str | None:
    """Why vLLM cannot sample the model in `folder` (None: it can), read from its config.json alone."""
    from training.models import folder_json

    config = folder_json(folder)
    if not config:
        return f"{folder} has no readable config.json"
    arch = (config.get("architectures") or ["?"])[0]
    if arch not in ARCHITECTURES:
        return f"its architecture {arch} is not one rlhf-studio sends to vLLM ({', '.join(ARCHITECTURES)})"
    try:
        head = config.get("head_dim") or config["hidden_size"] // config["num_attention_heads"]
    except (KeyError, TypeError, ZeroDivisionError):
        return f"{folder}/config.json names no head size (head_dim, or hidden_size and num_attention_heads)"
    if not (_on_gpu() if gpu is None else gpu) and head not in CPU_HEAD_SIZES:
        return (
            f"vLLM on a CPU needs a head size of {', '.join(map(str, CPU_HEAD_SIZES[:4]))}, ...; this model's is {head}"
        )
    return None


def engine_for(folder: Path, choice: str = "auto", sequences: int | None = None) -> tuple[str, str]:
    """(engine, why) for sampling the model in `folder`: 'vllm' or 'hf'. A choice of 'vllm' that cannot be met is
    an EngineError; 'auto' falls back to 'hf' and says why. `sequences`: the job's size where the caller knows it
    (prompts x K), which `auto` on a CPU gives to generate below CPU_ENGINE_PAYS_FROM."""
    if choice not in ENGINES:
        raise EngineError(f"engine must be {', '.join(ENGINES)}, got {choice}")
    why = "as configured"
    if choice == "auto":
        pinned = os.environ.get("RLHF_ENGINE", "")
        if pinned and pinned not in ENGINES[1:]:
            raise EngineError(f"RLHF_ENGINE must be vllm or hf, got {pinned}")
        choice, why = (pinned, "auto, pinned by RLHF_ENGINE") if pinned else ("auto", "")
    if choice == "hf":
        return "hf", why
    missing = "vLLM is not installed" if not vllm_installed() else unsupported(folder)
    if missing is None and not why and too_small(sequences):
        pays = f"fewer than the {CPU_ENGINE_PAYS_FROM} from which vLLM's start pays on a CPU"
        return "hf", f"auto: {sequences} sequences, {pays}"
    if missing is None:
        return "vllm", why or AUTO_VLLM
    if choice == "vllm":
        raise EngineError(f"cannot sample with vLLM: {missing}")
    return "hf", f"auto: {missing}"


def too_small(sequences: int | None, choice: str = "auto") -> bool:
    """Whether `choice` leaves a job of `sequences` to generate because an engine started for it would be slower (on
    a CPU, under `auto` not pinned by RLHF_ENGINE)."""
    if choice != "auto" or os.environ.get("RLHF_ENGINE") or sequences is None or CPU_ENGINE_PAYS_FROM is None:
        return False
    return sequences < CPU_ENGINE_PAYS_FROM and not _on_gpu()


def open_engine(folder: Path, choice: str, vllm, hf, sequences: int | None = None):
    """`vllm(why)` where engine_for picks vLLM for `folder`, else `hf(why)`: the one place a sampler or a trainer's
    rollouts choose their engine. Where `auto` picked vLLM because it loads the model but it cannot start here
    (`vllm` raises EngineError), `hf` samples and its why says so; vLLM asked for by name (the choice or
    RLHF_ENGINE=vllm) that cannot start is the caller's EngineError."""
    engine, why = engine_for(folder, choice, sequences)
    if engine == "hf":
        return hf(why)
    try:
        return vllm(why)
    except EngineError as e:
        if why != AUTO_VLLM:
            raise
        return hf(f"auto: {e}")


@dataclass
class Settings:
    """What sampling draws from: the same rules as the HF path (training/sampling/decode.py's filter_logits)."""

    temperature: float
    top_p: float
    top_k: int  # 0: off
    max_new_tokens: int
    min_tokens: int  # tokens before EOS may come (generate's min_new_tokens; the trainers' min_new_tokens - 1)


@dataclass
class Output:
    token_ids: list[int]  # the response's tokens, its EOS included when it ended
    ended: bool  # it emitted EOS (else it was cut at max_new_tokens)


class VllmEngine:
    """One vLLM engine over one model folder. `sample` draws n responses for each prompt (token ids in, token ids
    out); `stream` yields one response's tokens as they come (the Compare chat); `load_weights` replaces the
    model's weights in place (a PPO actor after its update)."""

    def __init__(
        self,
        folder: Path,
        dtype: str,
        eos_ids: list[int],
        max_model_len: int,
        seed: int = 0,
        only_eos: bool = False,
        in_process: bool = True,
    ):
        """eos_ids: where responses end. only_eos: there and nowhere else (a trainer's rollouts, whose EOS is one
        token); else also at the EOS ids of the model's generation_config.json, as transformers' generate does.

        in_process: the engine core and its worker run in this process (vLLM's uniprocess executor, no
        multiprocessing): it starts in half the time on a CPU (no two spawned processes importing torch and vLLM)
        and leaves nothing behind if this process dies. One engine at most runs so; a second one beside it runs in
        processes of its own. A trainer's rank passes False: vLLM sets up torch.distributed groups of its own and
        tears the process's down at shutdown, which in a rank would meet DeepSpeed's. An engine in processes of its
        own is watched (_watchdog). Calls to one engine from several threads take turns."""
        if not vllm_installed():
            raise EngineError("cannot sample with vLLM: vLLM is not installed")
        gpu = _on_gpu()
        _set_environment(gpu)
        self.folder = Path(folder)
        self.max_model_len = max_model_len
        self.eos_ids, self.only_eos = sorted(set(eos_ids)), only_eos
        # the app's sessions share an engine: one call steps it at a time (vLLM's LLM is not for several threads)
        self._turns = threading.RLock()
        self._streams: dict[str, collections.deque] = {}  # request id -> its outputs not yet read (stream)
        self._stream_ids = itertools.count()
        # On a CPU a prompt's prefill is never split across steps: vLLM 0.32 rewinds a seeded request's random
        # generator after a partial prefill, which a CPU generator cannot do ('CPU Generator does not use offset').
        extra = (
            # each rank's engine on that rank's GPU (an index into the visible ones), beside its trainer
            {"gpu_memory_utilization": GPU_MEMORY_SHARE, "device_ids": [_cuda_index()]}
            if gpu
            else {"enable_chunked_prefill": False, "max_num_batched_tokens": max(max_model_len, 4096)}
        )
        # on a GPU apart too: closing an engine in its own processes gives its memory back, CUDA context included,
        # for the training the app launches next
        self._start(dtype, seed, in_process and not gpu, extra)

    def _start(self, dtype: str, seed: int, in_process: bool, extra: dict) -> None:
        """The engine, watched from before it starts where it runs in processes of its own: an owner killed during
        the start (the app stopped while an engine warms) leaves no engine behind either. One start at a time in a
        process, so a watchdog notes only its own processes."""
        from vllm import LLM

        with _STARTING:
            self.in_process = in_process and not len(_IN_THIS_PROCESS) and not _distributed()
            self.watchdog = None if self.in_process else _watchdog(_children())
            try:
                with _multiprocessing(not self.in_process):
                    self.llm = LLM(
                        str(self.folder),
                        dtype={"bf16": "bfloat16", "fp32": "float32", "fp16": "float16"}[dtype],
                        seed=seed,
                        max_model_len=self.max_model_len,
                        enforce_eager=True,  # compiled graphs sampled no faster here and start 45 s later
                        enable_prefix_caching=True,  # the K samples of a prompt share its prefill
                        worker_extension_cls="training.sampling.vllm_worker.WeightSync",
                        disable_log_stats=True,
                        use_tqdm_on_load=False,  # the app's and the trainer's progress is what users watch
                        **extra,
                    )
            except Exception as e:  # vLLM raises many kinds; the user gets one line
                failure = f"vLLM cannot load {self.folder}: {str(e).splitlines()[0][:200]}"
            else:
                failure = None
            if failure:  # outside the except: the error's frames would keep the half-built engine's memory
                self.close()
                if self.in_process:  # its groups, set up before the model or the KV cache failed, go with it
                    _cleanup_process_groups()
                raise EngineError(failure)
            if self.in_process:
                _IN_THIS_PROCESS.add(self)
            try:
                if self.watchdog is not None:
                    self.watchdog.stdin.write(b"started\n")  # what it noted is this engine's: it keeps to that
                    self.watchdog.stdin.flush()
            except OSError:  # the watchdog is gone: the engine works, unwatched
                pass

    def sample(self, prompts: list[list[int]], n: int, s: Settings, seed: int) -> list[list[Output]]:
        """n responses for each prompt; out[i][j] is sample j of prompts[i]. Prompt i's request is seeded with
        request_seed(seed, i) (vLLM seeds its j-th sample with that + j): a run is reproducible, and two equal
        prompts, or the same prompt in two calls with other seeds, get different samples."""
        params = [self._params(n, s, request_seed(seed, i)) for i in range(len(prompts))]
        try:
            with self._turns:
                outs = self.llm.generate([{"prompt_token_ids": p} for p in prompts], params, use_tqdm=False)
        except ValueError as e:  # vLLM's request checks (a prompt longer than the engine holds, an empty one)
            raise EngineError(f"vLLM refused the request: {str(e).splitlines()[0][:200]}") from None
        return [[self._output(c) for c in o.outputs] for o in outs]

    def _params(self, n: int, s: Settings, seed: int, **extra):
        from vllm import SamplingParams

        return SamplingParams(
            n=n,
            temperature=s.temperature,
            top_p=s.top_p,
            top_k=s.top_k if s.top_k > 0 else -1,
            max_tokens=s.max_new_tokens,
            min_tokens=s.min_tokens,
            stop_token_ids=self.eos_ids,
            ignore_eos=self.only_eos,  # then only stop_token_ids end a response
            seed=seed,
            detokenize=False,
            **extra,
        )

    def stream(self, prompt: list[int], s: Settings, seed: int) -> Iterator[list[int]]:
        """One response to `prompt`, as the engine samples it: each item the tokens since the last (its EOS
        included when it ended), the seed request_seed(seed, 0)'s as in `sample`. Streams of one engine may be read
        in turns (the Compare chat's two sides of one model); one closed before its end aborts its request. Not
        beside `sample` on the same engine: vLLM's generate steps every request it holds."""
        from vllm.sampling_params import RequestOutputKind

        engine = self.llm.llm_engine
        rid = f"stream-{next(self._stream_ids)}"
        params = self._params(1, s, request_seed(seed, 0), output_kind=RequestOutputKind.DELTA)
        inbox = self._streams[rid] = collections.deque()  # before the request: another stream's step may answer it
        try:
            with self._turns:
                engine.add_request(rid, {"prompt_token_ids": prompt}, params)
        except ValueError as e:  # vLLM's request checks, as in `sample`
            self._streams.pop(rid, None)
            raise EngineError(f"vLLM refused the request: {str(e).splitlines()[0][:200]}") from None
        finished = False
        try:
            while not finished:
                while not inbox:
                    self._pump()
                tokens, finished = inbox.popleft()
                yield tokens
        finally:
            self._streams.pop(rid, None)
            if not finished:
                with self._turns:
                    engine.abort_request([rid])

    def _pump(self) -> None:
        """One engine step's outputs to the streams they belong to."""
        with self._turns:
            outs = self.llm.llm_engine.step()
        for out in outs:
            inbox = self._streams.get(out.request_id)
            if inbox is not None:
                inbox.append((list(out.outputs[0].token_ids), out.finished))

    def next_logprobs(self, prompt: list[int], k: int) -> dict[int, float]:
        """The log-probabilities of the k most likely next tokens after `prompt` (and of the one sampled) under
        the engine's model, raw (before temperature and filtering): which weights the engine holds."""
        from vllm import SamplingParams

        params = SamplingParams(max_tokens=1, logprobs=k, temperature=1.0, seed=0, detokenize=False)
        with self._turns:
            out = self.llm.generate([{"prompt_token_ids": prompt}], params, use_tqdm=False)[0].outputs[0]
        return {token: lp.logprob for token, lp in out.logprobs[0].items()}

    def _output(self, completion) -> Output:
        ids = list(completion.token_ids)
        ended = bool(ids) and ids[-1] in self.eos_ids
        return Output(token_ids=ids, ended=ended)

    def load_weights(self, tensors: dict) -> float:
        """Replace the model's weights by `tensors` (transformers' names; tied copies sent once). Returns the
        bytes sent. The prefix cache is dropped: its keys and values came from the old weights."""
        from safetensors.torch import save_file

        unique, seen = {}, set()
        for name, t in tensors.items():
            key = (t.data_ptr(), t.shape) if t.numel() else None
            if key in seen:
                continue  # a tied weight (lm_head = embed_tokens): vLLM ties it itself
            seen.add(key)
            unique[name] = t.detach().to("cpu").contiguous()
        fd, path = tempfile.mkstemp(suffix=".safetensors", prefix="rlhf-weights-", dir=_transfer_dir(unique))
        os.close(fd)
        try:
            save_file(unique, path)
            size = os.path.getsize(path)
            with self._turns:
                self.llm.collective_rpc("rlhf_load_weights", args=(path,))
                self.llm.reset_prefix_cache()
        finally:
            os.unlink(path)
        return size

    def close(self) -> None:
        llm, self.llm = getattr(self, "llm", None), None
        try:
            shutdown = getattr(llm.llm_engine, "engine_core", None) if llm is not None else None
            if shutdown is not None and hasattr(shutdown, "shutdown"):
                with self._turns:  # in this process: its memory goes back once nothing refers to it
                    shutdown.shutdown(timeout=2)
        finally:
            _IN_THIS_PROCESS.discard(self)
            self._close_watchdog()

    def _close_watchdog(self) -> None:
        watchdog, self.watchdog = getattr(self, "watchdog", None), None
        if watchdog is not None:
            watchdog.stdin.close()  # its engine is gone: it checks and leaves
            try:
                watchdog.wait(timeout=10)
            except subprocess.TimeoutExpired:  # a later engine's process holds the pipe too: this one is done
                watchdog.kill()


# The engine's processes outlive an owner killed with SIGKILL (a stopped training rank, a killed app): vLLM's
# engine core is a child that nothing tells. A watchdog, in a session of its own, is started before the engine and
# reads a pipe only the owner holds open. While the engine starts it notes the owner's new VLLM processes (not those
# that were there before: another engine's); the owner's "started" line ends that. At EOF (the owner closed the
# engine, or died, during the start or after) it kills the processes it noted that are still the ones it saw (same
# pid and start time: never a reused pid), and, where the owner died before it could note them, the orphaned VLLM
# processes (their parent gone) that started since the watchdog was asked for.
_WATCHDOG = """
import select, sys, time, psutil
owner, since, before = int(sys.argv[1]), float(sys.argv[2]), set(sys.argv[3:])
seen, starting = {}, True
def key(p):
    return f"{p.pid}:{p.create_time()}"
def note():
    try:
        for p in psutil.Process(owner).children():  # direct: a training the owner launched has engines of its own
            try:
                if key(p) not in before and p.name().startswith("VLLM"):
                    for q in [p, *p.children(recursive=True)]:
                        seen[key(q)] = q
            except psutil.Error:
                pass
    except psutil.Error:
        pass
def gone(pid):
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.Error:
        return True
while True:
    if starting:
        note()
    if not select.select([sys.stdin], [], [], 0.2 if starting else None)[0]:
        continue
    if not sys.stdin.readline():
        break
    starting = False
if starting:  # the pipe closed before the engine was up (the owner died, or the start failed): what it left
    time.sleep(0.5)  # a dying owner's pipe closes before its children are handed to init
    note()
for p in psutil.process_iter() if starting and gone(owner) else []:  # died: orphans it could not note
    try:
        if p.ppid() == 1 and p.name().startswith("VLLM") and p.create_time() >= since and key(p) not in before:
            for q in [p, *p.children(recursive=True)]:
                seen[key(q)] = q
    except psutil.Error:
        pass
for k, p in seen.items():
    try:
        if abs(p.create_time() - float(k.split(":")[1])) < 1e-3:
            p.kill()
    except psutil.Error:
        pass
"""


def request_seed(seed: int, i: int) -> int:
    """The seed of the i-th request of a call seeded `seed`: mixed (splitmix64's finaliser), so that the windows
    [s, s + n) vLLM gives a request's n samples do not line up across prompts or calls."""
    x = (seed * 0x9E3779B97F4A7C15 + i + 1) & 0xFFFFFFFFFFFFFFFF
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & 0xFFFFFFFFFFFFFFFF
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & 0xFFFFFFFFFFFFFFFF
    return (x ^ (x >> 31)) & 0x3FFFFFFF  # room for + n below 2**31


def _cuda_index() -> int:
    import torch

    return torch.cuda.current_device()


def _transfer_dir(tensors: dict) -> str | None:
    """/dev/shm where it holds the weights twice over (a container's is often 64 MB), else the system's temp."""
    import shutil

    size = sum(t.numel() * t.element_size() for t in tensors.values())
    try:
        return "/dev/shm" if shutil.disk_usage("/dev/shm").free > 2 * size else None
    except OSError:
        return None


def _set_environment(gpu: bool) -> None:
    """vLLM's settings, unless the user set them."""
    if not gpu:
        os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", str(CPU_KV_CACHE_GB))
        # the engine's threads share the cores with the app or the trainer's ranks: never pinned to cores
        os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", "nobind")
    # vLLM logs to stdout, where `rlhf` prints its results: to stderr, and only its errors unless asked for more
    os.environ.setdefault("VLLM_LOGGING_STREAM", "ext://sys.stderr")
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
    # an engine's processes start fresh rather than as forks of a threaded app or a trainer's rank
    os.environ.setdefault("VLLM_WORKER_MULTIPROC_METHOD", "spawn")


def _cleanup_process_groups() -> None:
    """What vLLM's shutdown of an engine in this process does to the process (its groups, torch.distributed, the
    cached memory), for a start that failed before there was an engine to shut down."""
    from vllm.distributed.parallel_state import cleanup_dist_env_and_memory

    cleanup_dist_env_and_memory()


def _distributed() -> bool:
    """Whether this process has torch.distributed groups (a trainer's rank) that an engine in it would meet."""
    import torch.distributed as dist

    return dist.is_available() and dist.is_initialized()


@contextlib.contextmanager
def _multiprocessing(on: bool):
    """vLLM's engine core in processes of its own (on) or in this one, for the engine started in the block: vLLM
    reads VLLM_ENABLE_V1_MULTIPROCESSING as it builds one. The variable is as it was afterwards. Under _STARTING.

    An engine core started in this process freezes vLLM's reading of its variables (envs.enable_envs_cache), so
    one beside it would read the first one's setting: the freeze is lifted first."""
    from vllm import envs

    envs.disable_envs_cache()
    name = "VLLM_ENABLE_V1_MULTIPROCESSING"
    was = os.environ.get(name)
    os.environ[name] = "1" if on else "0"
    try:
        yield
    finally:
        if was is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = was


def _children() -> list:
    import psutil

    return psutil.Process().children(recursive=True)


def _watchdog(before: list):
    """The watchdog of an engine about to start in this process; `before`: this process's children until now."""
    import sys
    import time

    args = [str(os.getpid()), str(time.time() - 1), *(f"{p.pid}:{p.create_time()}" for p in before)]
    return subprocess.Popen([sys.executable, "-c", _WATCHDOG, *args], stdin=subprocess.PIPE, start_new_session=True)
