"""vLLM as the sampling engine (training/sampling/vllm_engine.py): which engine samples a model and why, and on a tiny
real model (head size 32, which vLLM's CPU kernels take) that its samples follow the sampling settings the way the
transformers fallback does, that seeds reproduce, and that new weights really reach it."""

import json
from collections import Counter

import pytest
import torch

from training.models import ModelError
from training.sampling.generation import Sampler, SamplingConfig, open_sampler
from training.sampling.vllm_engine import (
    EngineError,
    Settings,
    VllmEngine,
    engine_for,
    open_engine,
    unsupported,
    vllm_installed,
)


def _config_file(folder, **over):
    config = {"architectures": ["LlamaForCausalLM"], "hidden_size": 64, "num_attention_heads": 2, **over}
    folder.mkdir(exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config))
    return folder


def test_unsupported_reads_the_architecture_and_the_cpu_head_size(tmp_path):
    assert unsupported(_config_file(tmp_path / "a"), gpu=False) is None  # head 64 / 2 = 32
    small = unsupported(_config_file(tmp_path / "b", num_attention_heads=4), gpu=False)
    assert small.endswith("this model's is 16")
    assert unsupported(_config_file(tmp_path / "b", num_attention_heads=4), gpu=True) is None  # GPUs take 16
    assert "GPT2LMHeadModel" in unsupported(_config_file(tmp_path / "c", architectures=["GPT2LMHeadModel"]), gpu=False)
    assert unsupported(_config_file(tmp_path / "d", head_dim=80, num_attention_heads=8), gpu=False) is None
    assert "no readable config.json" in unsupported(tmp_path / "missing")


def test_engine_for_falls_back_with_a_reason_and_a_pin_wins(tmp_path, monkeypatch):
    monkeypatch.delenv("RLHF_ENGINE", raising=False)
    small = _config_file(tmp_path / "small", num_attention_heads=4)
    assert engine_for(small, "hf") == ("hf", "as configured")
    if not torch.cuda.is_available():
        engine, why = engine_for(small, "auto")
        assert engine == "hf" and why.startswith("auto: ") and ("16" in why or "not installed" in why)
        with pytest.raises(EngineError, match="cannot sample with vLLM"):
            engine_for(small, "vllm")
    monkeypatch.setenv("RLHF_ENGINE", "hf")
    assert engine_for(_config_file(tmp_path / "ok"), "auto") == ("hf", "auto, pinned by RLHF_ENGINE")
    if vllm_installed():  # the pin is what auto means; a named engine stays
        assert engine_for(_config_file(tmp_path / "ok"), "vllm") == ("vllm", "as configured")
    monkeypatch.setenv("RLHF_ENGINE", "fast")
    with pytest.raises(EngineError, match="RLHF_ENGINE must be vllm or hf"):
        engine_for(small, "auto")
    with pytest.raises(EngineError, match="engine must be auto, vllm, hf"):
        engine_for(small, "sglang")


def test_open_engine_falls_back_only_where_auto_chose_vllm(tmp_path, monkeypatch):
    """An engine that cannot start: under auto, generate samples and says why; asked for by name, the error."""
    import training.sampling.vllm_engine as ve

    monkeypatch.delenv("RLHF_ENGINE", raising=False)
    monkeypatch.setattr(ve, "vllm_installed", lambda: True)
    monkeypatch.setattr(ve, "_on_gpu", lambda: False)
    ok = _config_file(tmp_path / "ok")  # head size 32: vLLM would load it

    def broken(why):
        raise EngineError("no room for the KV cache")

    assert open_engine(ok, "auto", lambda why: ("vllm", why), lambda why: ("hf", why)) == (
        "vllm",
        "auto: vLLM is installed and loads this model",
    )
    assert open_engine(ok, "auto", broken, lambda why: ("hf", why)) == ("hf", "auto: no room for the KV cache")
    with pytest.raises(EngineError, match="no room"):
        open_engine(ok, "vllm", broken, lambda why: ("hf", why))
    monkeypatch.setenv("RLHF_ENGINE", "vllm")  # pinned: as good as named
    with pytest.raises(EngineError, match="no room"):
        open_engine(ok, "auto", broken, lambda why: ("hf", why))
    small = _config_file(tmp_path / "small", num_attention_heads=4)
    monkeypatch.setenv("RLHF_ENGINE", "hf")
    assert open_engine(small, "auto", broken, lambda why: ("hf", why)) == ("hf", "auto, pinned by RLHF_ENGINE")


def test_auto_leaves_a_job_too_small_for_an_engines_start_to_generate_on_a_cpu(tmp_path, monkeypatch):
    import training.sampling.vllm_engine as ve

    monkeypatch.delenv("RLHF_ENGINE", raising=False)
    monkeypatch.setattr(ve, "vllm_installed", lambda: True)
    monkeypatch.setattr(ve, "_on_gpu", lambda: False)
    monkeypatch.setattr(ve, "CPU_ENGINE_PAYS_FROM", 40)
    ok = _config_file(tmp_path / "ok")
    assert engine_for(ok, "auto", 16) == (
        "hf",
        "auto: 16 sequences, fewer than the 40 from which vLLM's start pays on a CPU",
    )
    assert engine_for(ok, "auto", 40) == ("vllm", ve.AUTO_VLLM)  # from the line on, the engine
    assert engine_for(ok, "auto") == ("vllm", ve.AUTO_VLLM)  # a job of unknown size: the engine
    assert engine_for(ok, "vllm", 1) == ("vllm", "as configured")  # named: whatever the size
    monkeypatch.setenv("RLHF_ENGINE", "vllm")
    assert engine_for(ok, "auto", 1) == ("vllm", "auto, pinned by RLHF_ENGINE")  # pinned: as good as named
    monkeypatch.delenv("RLHF_ENGINE")
    monkeypatch.setattr(ve, "_on_gpu", lambda: True)
    assert engine_for(ok, "auto", 1) == ("vllm", ve.AUTO_VLLM)  # a GPU: every job on the engine
    monkeypatch.setattr(ve, "_on_gpu", lambda: False)
    monkeypatch.setattr(ve, "CPU_ENGINE_PAYS_FROM", None)  # not measured: no line
    assert engine_for(ok, "auto", 1) == ("vllm", ve.AUTO_VLLM)


def test_a_sampler_that_cannot_have_vllm_says_so_in_one_line(tiny_model_dir):
    """tiny_model_dir's head size is 8: vLLM on a CPU cannot load it, so --engine vllm is one ModelError line."""
    if torch.cuda.is_available():
        pytest.skip("a GPU takes head size 8")
    with pytest.raises(ModelError, match="cannot sample with vLLM") as e:
        open_sampler(SamplingConfig(model=str(tiny_model_dir), engine="vllm"))
    assert "\n" not in str(e.value)
    sampler = open_sampler(SamplingConfig(model=str(tiny_model_dir), engine="auto", max_new_tokens=2))
    assert sampler.engine == "hf" and sampler.engine_line.startswith("hf (auto: ")
    assert sampler.params(2)["engine"] == "hf"


def test_request_seeds_give_each_request_a_window_of_its_own():
    """vLLM seeds a request's j-th sample with its seed + j: the windows of 64 samples of 64 prompts in each of
    3 calls (seeds 0, 1, 2) never overlap, and all stay below 2**31."""
    from training.sampling.vllm_engine import request_seed

    starts = sorted(request_seed(seed, i) for seed in range(3) for i in range(64))
    assert len(set(starts)) == len(starts) and starts[-1] + 64 < 2**31
    assert all(b - a >= 64 for a, b in zip(starts, starts[1:], strict=False))
    assert request_seed(5, 3) == request_seed(5, 3)  # a function of (seed, i) only: runs reproduce


# ---- on a real engine: a tiny talking model whose next-token distribution is known (training/tiny.py) ----

needs_vllm = pytest.mark.skipif(not vllm_installed(), reason="vLLM is not installed (make installs it)")


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    """A talker with head size 32 whose 48 words have graded logits (word j: 0.25 j below word 0). EOS: the mass
    of 2 words of word 0's logit (eos_rate 0.04 x 48 / 0.96), against the words' 1 / (1 - e^-0.25) = 4.52: 31%."""
    from training.tiny import build_talking_model

    out = tmp_path_factory.mktemp("graded")
    return build_talking_model(out, n_words=48, eos_rate=0.04, heads=2, spread=0.25)


@pytest.fixture(scope="module")
def engines(graded):
    """The vLLM sampler and the transformers one over the same model, fp32."""
    config = SamplingConfig(model=str(graded), dtype="fp32", engine="vllm", max_new_tokens=5, min_new_tokens=3)
    ours = open_sampler(config)
    yield ours, Sampler(SamplingConfig(model=str(graded), dtype="fp32", engine="hf"))
    ours.close()


def _first_tokens(sampler, prompt_ids, settings, n, seed):
    """n first tokens drawn by `sampler` with `settings`."""
    if sampler.engine == "vllm":
        outs = sampler.vllm.sample([prompt_ids], n, settings, seed)[0]
        return [o.token_ids[0] for o in outs]
    torch.manual_seed(seed)
    with torch.inference_mode():
        out = sampler.model.generate(
            input_ids=torch.tensor([prompt_ids]),
            do_sample=True,
            temperature=settings.temperature,
            top_p=settings.top_p,
            top_k=settings.top_k or None,
            max_new_tokens=1,
            num_return_sequences=n,
            pad_token_id=sampler.pad_id,
        )
    return out[:, -1].tolist()


def _expected(model, prompt_ids, settings) -> torch.Tensor:
    """The distribution sampling draws the first token from: the model's fp32 logits through the HF path's rules
    (training/sampling/decode.py's filter_logits: temperature, then top-k, then top-p)."""
    from training.sampling.decode import filter_logits

    with torch.no_grad():
        logits = model(torch.tensor([prompt_ids])).logits[:, -1].float()
    return filter_logits(logits, settings.temperature, settings.top_k, settings.top_p).softmax(-1)[0]


def _total_variation(sampler, prompt, settings, p, n: int = 2000) -> float:
    """n first tokens from `sampler`: none outside the support of p, and their frequencies' distance from p."""
    support = set(torch.nonzero(p > 0).flatten().tolist())
    counts = Counter(_first_tokens(sampler, prompt, settings, n, seed=7))
    assert set(counts) <= support, f"{sampler.engine} drew outside the support"
    return 0.5 * sum(abs(counts.get(t, 0) / n - float(p[t])) for t in support | set(counts))


@pytest.mark.integration
@needs_vllm
@pytest.mark.parametrize(
    "temperature,top_k,top_p", [(1.0, 0, 1.0), (0.5, 0, 1.0), (1.0, 5, 1.0), (1.0, 0, 0.6), (1.5, 6, 0.7)]
)
def test_vllm_draws_from_the_filtered_distribution(engines, temperature, top_k, top_p):
    """Nothing outside the filtered support, and the frequencies within 0.06 (total variation) of the exact
    filtered distribution (the fallback's rules). Expected noise at 2,000 draws: about 0.02-0.03."""
    ours, hf = engines
    prompt = hf.tokenizer(hf.chat_prompt("Say something."), add_special_tokens=False)["input_ids"]
    settings = Settings(temperature, top_p, top_k, max_new_tokens=1, min_tokens=0)
    assert _total_variation(ours, prompt, settings, _expected(hf.model, prompt, settings)) < 0.06


@pytest.mark.integration
@needs_vllm
def test_the_fallback_draws_from_the_same_distribution(engines):
    """transformers' generate under the same settings, against the same exact distribution: the two engines
    apply temperature, top-k and top-p the same way. 1,000 draws over at most 6 tokens: noise about 0.03."""
    _, hf = engines
    prompt = hf.tokenizer(hf.chat_prompt("Say something."), add_special_tokens=False)["input_ids"]
    settings = Settings(1.5, 0.7, 6, max_new_tokens=1, min_tokens=0)
    assert _total_variation(hf, prompt, settings, _expected(hf.model, prompt, settings), n=1000) < 0.07


@pytest.mark.integration
@needs_vllm
def test_vllm_samples_keep_max_and_min_tokens_and_seeds_reproduce(engines):
    """max_new_tokens=5, min_new_tokens=3 (generate's meaning: 3 tokens before EOS may come). EOS has 31-50% a
    token (the talker's scale moves with the context), so of 48 samples many end at the first chance (4 tokens with
    EOS) and many (25-48%) are cut at 5."""
    ours, _ = engines
    prompts = [f"Tell me about {w}." for w in ("cats", "rivers", "cats")]
    first = ours(prompts, 16, seed=3)
    lengths = [g.n_tokens for row in first for g in row]
    assert max(lengths) <= 5 and min(lengths) >= 4
    assert all(g.n_tokens >= 4 for row in first for g in row if g.finish_reason == "eos")
    assert Counter(g.finish_reason for row in first for g in row).keys() == {"eos", "length"}
    assert min(lengths) == 4
    again = ours(prompts, 16, seed=3)
    assert [[g.text for g in row] for row in again] == [[g.text for g in row] for row in first]
    other = ours(prompts, 16, seed=4)
    assert [[g.text for g in row] for row in other] != [[g.text for g in row] for row in first]
    assert [g.text for g in first[0]] != [g.text for g in first[2]]  # equal prompts, their own seeds
    assert ours.params(16)["engine"] == "vllm" and ours.engine_line == "vllm (as configured)"


@pytest.mark.integration
@needs_vllm
def test_new_weights_reach_the_engine(engines):
    """After load_weights the engine's next-token log-probs are those of the changed model (fp32, 1e-4), and
    before it they were the old model's: the weights really travelled."""
    ours, hf = engines
    prompt = hf.tokenizer(hf.chat_prompt("Say something."), add_special_tokens=False)["input_ids"]

    def reference(model):
        with torch.no_grad():
            return model(torch.tensor([prompt])).logits[0, -1].float().log_softmax(-1)

    before = ours.vllm.next_logprobs(prompt, 5)
    old = reference(hf.model)
    assert max(abs(lp - float(old[t])) for t, lp in before.items()) < 1e-4
    changed = type(hf.model).from_pretrained(ours.folder, dtype=torch.float32)
    torch.manual_seed(0)
    with torch.no_grad():
        for p in changed.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    sent = ours.vllm.load_weights(changed.state_dict())
    assert sent > 0
    new = reference(changed)
    after = ours.vllm.next_logprobs(prompt, 5)
    assert max(abs(lp - float(new[t])) for t, lp in after.items()) < 1e-4
    assert max(abs(float(new[t]) - float(old[t])) for t in after) > 1e-2  # the change is visible
    ours.vllm.load_weights(hf.model.state_dict())  # the module's engine as it was


def _vllm_children() -> list:
    import psutil

    alive = [p for p in psutil.Process().children(recursive=True) if "VLLM" in p.name()]
    return [p for p in alive if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]


@pytest.mark.integration
@needs_vllm
def test_one_engine_runs_in_the_process_and_a_second_beside_it_in_processes_of_its_own(engines, graded):
    """The app's first engine runs in its process (no VLLM process); a second one at the same time (a round's
    policy beside the Sample button's) runs in VLLM processes of its own, as a trainer's does. Sampled at once from
    two threads, each draws what it draws alone, seed for seed, and the two draw alike for the same seed; new weights
    reach the second; closing it ends its processes and leaves the first working (vLLM's shutdown of an engine in
    the process tears down the process's parallel groups: a second one in it would take the first's down)."""
    import threading
    import time

    ours, hf = engines
    assert ours.vllm.in_process and _vllm_children() == []
    other = VllmEngine(graded, "fp32", ours.vllm.eos_ids, 256, seed=1)
    try:
        assert not other.in_process and _vllm_children()
        prompts = [
            hf.tokenizer(hf.chat_prompt(f"Tell me about {w}."), add_special_tokens=False)["input_ids"]
            for w in ("cats", "rivers", "maps")
        ]
        settings = Settings(1.0, 1.0, 0, max_new_tokens=12, min_tokens=0)
        alone = {"a": ours.vllm.sample(prompts, 6, settings, 3), "b": other.sample(prompts, 6, settings, 4)}
        assert alone["a"] != alone["b"] and other.sample(prompts, 6, settings, 3) == alone["a"]
        together: dict = {"a": [], "b": []}

        def run(name, engine, seed):
            for _ in range(4):
                together[name].append(engine.sample(prompts, 6, settings, seed))

        threads = [
            threading.Thread(target=run, args=a) for a in (("a", ours.vllm, 3), ("b", other, 4), ("b", other, 4))
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=300)
        assert together == {"a": [alone["a"]] * 4, "b": [alone["b"]] * 8}  # two threads on one engine, too

        changed = type(hf.model).from_pretrained(ours.folder, dtype=torch.float32)
        with torch.no_grad():
            for p in changed.parameters():
                p.mul_(0.5)
            expected = changed(torch.tensor([prompts[0]])).logits[0, -1].float().log_softmax(-1)
        other.load_weights(changed.state_dict())
        assert max(abs(lp - float(expected[t])) for t, lp in other.next_logprobs(prompts[0], 5).items()) < 1e-4
    finally:
        other.close()
    deadline = time.monotonic() + 20
    while _vllm_children() and time.monotonic() < deadline:  # the engine core's exit is not waited for
        time.sleep(0.2)
    assert _vllm_children() == []
    assert ours.vllm.sample(prompts, 6, settings, 3) == alone["a"]


@pytest.mark.integration
@needs_vllm
def test_a_start_that_fails_in_the_process_leaves_it_as_it_was(graded, tmp_path):
    """An engine whose weights cannot load fails after vLLM set up its groups in the process: one line, the groups
    taken down with it, and the next engine still runs in the process (it ran apart, as beside a trainer's groups,
    before the failed start cleaned up). In a process of its own: the module's engine runs in this one."""
    import shutil
    import subprocess
    import sys

    broken = tmp_path / "broken"
    shutil.copytree(graded, broken)
    (broken / "model.safetensors").write_bytes(b"not weights")
    script = tmp_path / "owner.py"
    script.write_text(
        "if __name__ == '__main__':\n"
        "    import torch.distributed as dist\n"
        "    from training.sampling.vllm_engine import EngineError, VllmEngine\n"
        "    try:\n"
        f"        VllmEngine({str(broken)!r}, 'fp32', [2], 256)\n"
        "    except EngineError as e:\n"
        "        print('refused:', str(e).splitlines()[0][:60], '|', len(str(e).splitlines()), flush=True)\n"
        "    print('distributed after:', dist.is_initialized(), flush=True)\n"
        f"    engine = VllmEngine({str(graded)!r}, 'fp32', [2], 256)\n"
        "    print('next in process:', engine.in_process, flush=True)\n"
        "    engine.close()\n"
    )
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300).stdout
    assert f"refused: vLLM cannot load {broken}"[:68] in out and "| 1" in out, out
    assert "distributed after: False" in out and "next in process: True" in out, out


@pytest.mark.integration
@needs_vllm
def test_an_owner_killed_while_its_engine_starts_leaves_no_engine_behind(graded, tmp_path):
    """The app stopped while an engine warms in the background: the engine core already runs, vLLM has not returned,
    and the watchdog (started before the engine) kills it."""
    import os
    import signal
    import subprocess
    import sys
    import time

    import psutil

    script = tmp_path / "owner.py"
    script.write_text(
        "if __name__ == '__main__':\n"
        "    from training.sampling.vllm_engine import VllmEngine\n"
        f"    VllmEngine({str(graded)!r}, 'fp32', [2], 256, in_process=False)\n"
        "    print('ready', flush=True)\n"
    )
    owner = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    deadline, engine = time.monotonic() + 120, []
    while not engine and time.monotonic() < deadline and owner.poll() is None:
        try:
            engine = [p for p in psutil.Process(owner.pid).children(recursive=True) if "VLLM" in p.name()]
        except psutil.Error:
            break
        time.sleep(0.05)
    assert engine, "the engine core starts in a process of its own"
    os.kill(owner.pid, signal.SIGKILL)  # before the engine is up: it loads the model for seconds after it starts
    owner.wait()
    deadline = time.monotonic() + 20
    while any(p.is_running() and p.status() != psutil.STATUS_ZOMBIE for p in engine) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not any(p.is_running() and p.status() != psutil.STATUS_ZOMBIE for p in engine)
    assert b"ready" not in owner.communicate(timeout=30)[0]  # killed during the start, not after it


@pytest.mark.integration
@needs_vllm
def test_an_owner_killed_with_sigkill_leaves_no_engine_behind(graded, tmp_path):
    """vLLM's engine core is a child process nothing tells when its owner dies: the engine's watchdog kills it."""
    import os
    import signal
    import subprocess
    import sys
    import time

    import psutil

    script = tmp_path / "owner.py"
    script.write_text(
        "import sys, time\n"
        "if __name__ == '__main__':\n"
        "    from training.sampling.vllm_engine import VllmEngine\n"
        f"    VllmEngine({str(graded)!r}, 'fp32', [2], 256, in_process=False)\n"
        "    print('ready', flush=True)\n"
        "    time.sleep(300)\n"
    )
    owner = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=1)
    assert any(line.strip() == "ready" for line in owner.stdout)  # vLLM logs to stdout before it
    engine = [p for p in psutil.Process(owner.pid).children(recursive=True) if "VLLM" in p.name()]
    assert engine, "the engine runs in processes of its own"
    os.kill(owner.pid, signal.SIGKILL)
    owner.wait()
    deadline = time.monotonic() + 20
    while any(p.is_running() and p.status() != psutil.STATUS_ZOMBIE for p in engine) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not any(p.is_running() and p.status() != psutil.STATUS_ZOMBIE for p in engine)


@pytest.mark.integration
@needs_vllm
def test_the_chat_streams_from_the_engine_what_it_samples(engines):
    """The Compare chat on vLLM (training/sampling/chat.py's VllmChatModel over the module's engine): the two sides of
    one model, read in turns, stream the replies `sample` draws with the same seed (EOS cut off); best-of-N's N replies
    come from one n=N request; a stream closed early aborts its request, and the engine serves the next."""
    from dataclasses import replace

    from training.sampling.chat import ChatParams, VllmChatModel, chat_ids, stream_pair

    ours, _ = engines
    chat = VllmChatModel(ours.folder, "as configured", vllm=ours.vllm)
    params = ChatParams(temperature=1.0, top_p=1.0, max_new_tokens=8, min_new_tokens=3, seed=5)  # EOS from the 3rd
    left = [{"role": "user", "content": "Tell me about cats."}]
    right = [{"role": "user", "content": "Tell me about rivers."}]
    frames = list(stream_pair(chat, chat, left, right, params))
    assert len(frames) >= 2 and frames[-1][2:] == (True, True) and frames[0][0] != frames[-1][0]  # token by token
    for messages, text in ((left, frames[-1][0]), (right, frames[-1][1])):
        drawn = ours.vllm.sample([chat_ids(chat.tokenizer, messages)], 1, chat.settings(params), params.seed)[0][0]
        kept = drawn.token_ids[:-1] if drawn.ended else drawn.token_ids
        assert text == chat.tokenizer.decode(kept, skip_special_tokens=True)

    ids = chat_ids(chat.tokenizer, left)
    replies = chat.replies(ids, params, 6)
    assert len(replies) == 6 and len({tuple(r) for r in replies}) > 1
    assert all(2 <= len(r) <= 8 and not set(r) & chat.eos for r in replies)

    stream = chat.tokens(ids, replace(params, max_new_tokens=64))
    next(stream)
    stream.close()
    assert not ours.vllm.llm.llm_engine.has_unfinished_requests() and not ours.vllm._streams
    assert 2 <= len(list(chat.tokens(ids, params))) <= 8


@pytest.mark.integration
@needs_vllm
def test_the_apps_chat_process_streams_on_vllm_in_its_own_process(graded, monkeypatch):
    """The app's chat child (app/jobs/chat_worker.py) samples the Compare chat on vLLM under auto, with the
    engine's core inside the child (at the child's low priority): no VLLM:: process of its own, and none left after
    release."""
    import psutil

    from app.jobs.chat_worker import ChatWorker
    from training.sampling.chat import ChatParams

    monkeypatch.delenv("RLHF_ENGINE", raising=False)
    worker = ChatWorker(max_loaded=1)
    try:
        history = [{"role": "user", "content": "Tell me about cats."}]
        params = ChatParams(temperature=1.0, top_p=1.0, max_new_tokens=6, min_new_tokens=3, seed=2)
        frames = list(worker.pair([str(graded)] * 2, [history, history], params))
        assert frames and frames[-1][0] == frames[-1][1] != ""  # one model, one seed: the same reply
        assert worker.last_pair["engines"] == ["vllm", "vllm"]
        child = psutil.Process(worker.pid())
        assert not [p for p in child.children(recursive=True) if p.name().startswith("VLLM")]
    finally:
        worker.release()
    assert not child.is_running()


def test_rollouts_under_auto_use_the_own_decode_on_a_cpu(tiny_model_dir, monkeypatch):
    """bench/ppo.py measured vLLM rollouts no faster than the trainers' own decode on this CPU: `auto` keeps the
    faster path there and says why; asking for vLLM by name (or RLHF_ENGINE) still gets it where it loads."""
    from training.ppo.config import PPOConfig
    from training.rollouts.prompt_run import CPU_ROLLOUTS, rollout_engine

    if torch.cuda.is_available():
        pytest.skip("on a GPU auto takes vLLM")
    monkeypatch.delenv("RLHF_ENGINE", raising=False)
    assert rollout_engine(PPOConfig(actor=str(tiny_model_dir)), 2) == (None, f"hf (auto: {CPU_ROLLOUTS})")
    monkeypatch.setenv("RLHF_ENGINE", "hf")
    assert rollout_engine(PPOConfig(actor=str(tiny_model_dir)), 2) == (None, "hf (auto, pinned by RLHF_ENGINE)")
    with pytest.raises(ValueError, match="cannot sample with vLLM"):  # head size 8: named, it is one line
        rollout_engine(PPOConfig(actor=str(tiny_model_dir), rollout_engine="vllm"), 2)


def test_the_cpu_line_is_the_committed_estimate_of_where_an_engines_start_pays():
    """CPU_ENGINE_PAYS_FROM is the chromium walk's estimate (bench/sample_click.py) in the committed results, in
    sequences: its break-even job in prompts, rounded up, times its K."""
    import math
    from pathlib import Path

    from training.sampling.vllm_engine import CPU_ENGINE_PAYS_FROM

    results = json.loads((Path(__file__).parent.parent / "docs" / "benchmarks.json").read_text())
    (row,) = results["clicks"]
    assert CPU_ENGINE_PAYS_FROM == math.ceil(row["break_even_prompts"]) * row["k"]
