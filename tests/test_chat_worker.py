"""The Compare tab's chat worker (app/chat_worker.py): the same replies and scores as in-process sampling, errors as
their one line, a stream abandoned half-way does not hold up the next, release ends the child, and the child runs
at a lower CPU priority than the app."""

import os
from pathlib import Path

import pytest

from app.chat_worker import NICE, ChatWorker
from app.compare import LocalChat
from tests.test_ppo_training import build_liked_token_rm
from training.chat import ChatParams, Models
from training.models import ModelError


def _nice(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[16])


@pytest.fixture(scope="module")
def worker():
    w = ChatWorker(max_loaded=2)
    yield w
    w.release()


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


def test_release_ends_the_child_and_the_next_request_starts_another(tiny_model_dir):
    w = ChatWorker(max_loaded=1)
    histories = [[{"role": "user", "content": "hi"}]] * 2
    list(w.pair([str(tiny_model_dir)] * 2, histories, ChatParams(max_new_tokens=2)))
    first = w.pid()
    assert w.release() == 1 and w.pid() is None and not Path(f"/proc/{first}").exists()
    list(w.pair([str(tiny_model_dir)] * 2, histories, ChatParams(max_new_tokens=2)))
    assert w.pid() not in (None, first)
    w.release()
