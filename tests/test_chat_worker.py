"""The Compare tab's chat worker (app/jobs/chat_worker.py): the same replies and scores as in-process sampling, errors
as their one line, a stream abandoned half-way does not hold up the next, release ends the child, and the child runs
at a lower CPU priority than the app, and waits after its steps while the app is busy."""

import math
import os
from pathlib import Path
from types import SimpleNamespace

import pytest

from app.jobs.chat_worker import NICE, AppActivity, ChatWorker, keep_waiting, wait_budget_s
from app.jobs.compare import LocalChat
from tests.builders import build_liked_token_rm
from training.models import ModelError
from training.sampling.chat import ChatParams, Models


def _nice(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[16])


@pytest.fixture(scope="module")
def worker():
    w = ChatWorker(max_loaded=2)
    yield w
    w.release()


@pytest.mark.integration
def test_the_worker_samples_and_scores_as_this_process_does(worker, tiny_model_dir, tmp_path):
    rm = str(build_liked_token_rm(tiny_model_dir, tmp_path / "rm"))
    sides, histories = [str(tiny_model_dir)] * 2, [[{"role": "user", "content": "Tell me a joke"}]] * 2
    params = ChatParams(max_new_tokens=6, min_new_tokens=6, seed=3)
    here = list(LocalChat(Models()).pair(sides, histories, params))
    there = list(worker.pair(sides, histories, params))
    # the child sends at most a frame every FRAME_S, always the last: the same texts, fewer frames
    assert there[-1] == here[-1] and there[-1][0] and set(there) <= set(here) and there[0] == here[0]
    replies = list(there[-1])
    assert worker.scores(rm, histories, replies) == LocalChat(Models()).scores(rm, histories, replies)
    assert _nice(worker.pid()) == _nice(os.getpid()) + NICE
    if hasattr(os, "SCHED_IDLE"):
        assert os.sched_getscheduler(worker.pid()) == os.SCHED_IDLE


@pytest.mark.integration
def test_an_error_is_its_line_and_an_abandoned_stream_does_not_hold_up_the_next(worker, tiny_model_dir, tmp_path):
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "config.json").write_text("{not json")
    histories = [[{"role": "user", "content": "hi"}]] * 2
    with pytest.raises(ModelError, match=f"{broken}/config.json is not a readable config"):
        list(worker.pair([str(broken)] * 2, histories, ChatParams(max_new_tokens=2)))
    long = worker.pair([str(tiny_model_dir)] * 2, histories, ChatParams(max_new_tokens=400, min_new_tokens=400))
    assert len(next(long)) == 2
    long.close()  # the page's Stop
    params = ChatParams(max_new_tokens=4, min_new_tokens=4, seed=1)
    last = list(worker.pair([str(tiny_model_dir)] * 2, histories, params))[-1]
    assert last == list(LocalChat(Models()).pair([str(tiny_model_dir)] * 2, histories, params))[-1]


@pytest.mark.integration
def test_release_ends_the_child_and_the_next_request_starts_another(tiny_model_dir):
    w = ChatWorker(max_loaded=1)
    histories = [[{"role": "user", "content": "hi"}]] * 2
    list(w.pair([str(tiny_model_dir)] * 2, histories, ChatParams(max_new_tokens=2)))
    first = w.pid()
    assert w.release() == 1 and w.pid() is None and not Path(f"/proc/{first}").exists()
    list(w.pair([str(tiny_model_dir)] * 2, histories, ChatParams(max_new_tokens=2)))
    assert w.pid() not in (None, first)
    w.release()


def test_the_yield_to_a_busy_app_by_hand():
    # a step of 0.1 s CPU at a 10% share: 0.9 s of wait at most; a long first step (a model's load) at most 5 s
    assert wait_budget_s(0.1) == pytest.approx(0.9) and wait_budget_s(0.2, share=0.5) == pytest.approx(0.2)
    assert wait_budget_s(3.0) == 5.0
    assert keep_waiting(math.inf, 10.0, 11.0)  # an event runs
    assert keep_waiting(9.8, 10.0, 11.0)  # one ended 0.2 s ago: still busy (QUIET_S 0.3)
    assert not keep_waiting(9.6, 10.0, 11.0)  # quiet for 0.4 s: go on
    assert not keep_waiting(math.inf, 11.0, 11.0)  # the step's budget is spent
    clock = iter([5.0, 7.0])
    activity = AppActivity(SimpleNamespace(value=-math.inf), clock=lambda: next(clock))
    activity.begin()
    activity.begin()
    activity.end()
    assert activity.last_busy == math.inf  # one of two events still runs
    activity.end()
    assert activity.last_busy == 5.0
    activity.end()  # an unmatched end counts from zero again
    assert activity.last_busy == 7.0


@pytest.mark.integration
def test_the_child_waits_after_each_step_while_the_app_is_busy_and_not_when_it_is_quiet(worker, tiny_model_dir):
    sides, histories = [str(tiny_model_dir)] * 2, [[{"role": "user", "content": "hi"}]] * 2
    params = ChatParams(max_new_tokens=3, min_new_tokens=3, seed=1)
    quiet = list(worker.pair(sides, histories, params))[-1]
    assert worker.last_pair["steps"] >= 3 and worker.last_pair["waited"] == 0
    worker.activity.begin()  # an annotator's submit is being handled
    try:
        busy = list(worker.pair(sides, histories, params))[-1]
    finally:
        worker.activity.end()
    assert worker.last_pair["waited"] == worker.last_pair["steps"] >= 3
    assert busy == quiet  # the same reply, later
