"""Every size a user controls has a cap the server enforces (app/faces/limits.py), driven through a real `rlhf ui` with
gradio_client as an annotator's script would; and the Compare tab's model cache keeps only the last few."""

import shutil
import time
from pathlib import Path

import pytest

from app.faces.limits import ServeLimits
from bench.app_server import AppServer
from store.errors import UserError
from tests.conftest import query
from training.sampling.chat import Models


def _send(client, message, actor, reference, max_new=8, best_of=1):
    # message, actor, reference, blind, temperature, top_p, max new tokens, seed, reward, best-of-N
    return client.predict(
        message, actor, reference, False, 0.8, 0.95, max_new, 0, "", best_of, api_name="/compare_send"
    )


@pytest.fixture(scope="module")
def served(tmp_path_factory, tiny_model_dir):
    folder = tmp_path_factory.mktemp("limits")
    reference = shutil.copytree(tiny_model_dir, folder / "reference")
    db = str(folder / "store.duckdb")
    server = AppServer(db, "--model", str(tiny_model_dir), "--max-new-tokens", "4096")
    yield server, server.client(), str(tiny_model_dir), str(reference), db
    server.stop()


@pytest.mark.integration
def test_oversized_compare_requests_are_one_line_and_sample_nothing(served):
    """A million new tokens (the decode would size its cache for them before the first one), a 5,000-character
    message, best-of-1000: each refused before a model loads, and the server answers the next request."""
    server, client, actor, reference, _ = served
    with pytest.raises(Exception, match="greater than maximum value 4096"):  # Gradio's own bound on the box
        _send(client, "hi", actor, reference, max_new=10**6)
    with pytest.raises(Exception, match="the message is 5,000 characters; this server takes at most 4,000"):
        _send(client, "x" * 5000, actor, reference)
    with pytest.raises(Exception, match="greater than maximum value 16"):
        _send(client, "hi", actor, reference, best_of=1000)
    left, right, *_ = _send(client, "hi", actor, reference)
    assert len(left) == len(right) == 2  # the message and each side's reply


@pytest.mark.integration
def test_a_reply_that_would_pass_the_models_context_is_refused(served):
    _, client, actor, reference, _ = served
    with pytest.raises(Exception, match="2000 new ones would pass this model's context of 1024"):
        _send(client, "hi", actor, reference, max_new=2000)


@pytest.mark.integration
def test_k_is_capped_where_the_app_samples(served):
    """The Data tab's Sample and the Train tab's next round (K from the policy + M from the previous one)."""
    _, client, _, _, db = served
    client.predict(api_name="/load_examples")
    with pytest.raises(Exception, match="greater than maximum value 16"):
        client.predict(1000, 1, api_name="/sample")
    with pytest.raises(Exception, match=r"responses per prompt \(K\) must be from 1 to 16 on this server, got 1001"):
        client.predict("a-run", 1000, 1, "random", 0, api_name="/start_round")
    assert query(db, "SELECT count(*) FROM responses") == [(0,)]


def test_the_caps_as_plain_checks():
    limits = ServeLimits(max_new_tokens=10, max_message_chars=5, max_best_of=2, max_k=3, max_sample_tokens=7)
    limits.check_chat("12345", 10, 2)  # at each cap: fine
    limits.check_sampling(3, 7)
    for args, line in [
        (("123456", 1, 1), "the message is 6 characters; this server takes at most 5"),
        (("hi", 11, 1), "max new tokens must be from 1 to 10 on this server, got 11"),
        (("hi", 0, 1), "max new tokens must be from 1 to 10 on this server, got 0"),
        (("hi", 1, 3), "best-of-N must be from 1 to 2 on this server, got 3"),
    ]:
        with pytest.raises(UserError, match=line):
            limits.check_chat(*args)
    with pytest.raises(UserError, match="max new tokens must be from 1 to 7 on this server, got 8"):
        limits.check_sampling(2, 8)


@pytest.mark.integration
def test_the_apps_chat_keeps_at_most_its_cap_of_models_loaded(tmp_path, tiny_model_dir):
    """Through the app, --max-chat-models 2: chats with m0, m1, m2, then m1 and m0 again. The app's log shows each
    load: m2 dropped m0 (the least recently used), m1 answered again from memory, and m0 had to load again."""
    folders = [str(shutil.copytree(tiny_model_dir, tmp_path / f"m{i}")) for i in range(3)]
    server = AppServer(str(tmp_path / "s.duckdb"), "--model", str(tiny_model_dir), "--max-chat-models", "2")
    try:
        client = server.client()
        for i in (0, 1, 2, 1, 0):
            left, right, *_ = _send(client, "hi", folders[i], folders[i])
            assert len(left) == len(right) == 2
        loads = [line for line in server.output().splitlines() if line.startswith("chat: loaded causal model")]
    finally:
        server.stop()
    held = [line.split(" model ", 1)[1] for line in loads]
    m0, m1, m2 = (str(Path(f).resolve()) for f in folders)
    assert held == [
        f"{m0} (1 of 2 held)",
        f"{m1} (2 of 2 held)",
        f"{m2} (2 of 2 held; dropped {m0})",
        f"{m0} (2 of 2 held; dropped {m2})",  # m1 was used after m2: m2 went
    ]


def test_the_chat_cache_keeps_the_least_recently_used_out(tiny_model_dir, tmp_path):
    folders = [str(shutil.copytree(tiny_model_dir, tmp_path / f"m{i}")) for i in range(3)]
    models = Models(max_loaded=2)
    first = models.causal(folders[0])
    models.causal(folders[1])
    assert models.causal(folders[0]) is first  # a hit, and now the most recent
    models.causal(folders[2])  # over the cap: m1, the least recently used, goes
    assert [p.rsplit("/", 1)[1] for _, p in models.loaded()] == ["m0", "m2"]
    assert models.causal(folders[0]) is first
    with pytest.raises(ValueError, match="at least 1 model"):
        Models(max_loaded=0)


def test_a_login_has_one_chat_request_waiting_and_chat_takes_half_the_queue_at_most():
    from types import SimpleNamespace as Event

    from app.faces.chat_queue import chat_refusal

    waiting = [Event(username="ann", session_hash="s1"), Event(username="bob", session_hash="s2")]
    assert chat_refusal(waiting, "ann", "s9", 64).startswith("your Compare request is still waiting")
    assert chat_refusal(waiting, "carol", "s3", 64) is None
    assert chat_refusal(waiting, "carol", "s3", 4).startswith("Compare is busy (2 requests waiting)")
    # without --auth a login is its page session
    anonymous = [Event(username=None, session_hash="s1")]
    assert chat_refusal(anonymous, None, "s1", 64) and chat_refusal(anonymous, None, "s2", 64) is None


@pytest.mark.integration
def test_every_event_but_the_chats_marks_the_app_busy_while_it_runs():
    """The chat's child yields to the app's other events (app/jobs/chat_worker.py): share_the_queue marks each of them
    on the AppActivity while it runs, and leaves the chat's own events out."""
    import math
    from types import SimpleNamespace

    import gradio as gr
    from gradio_client import Client

    from app.faces.chat_queue import CHAT, share_the_queue
    from app.jobs.chat_worker import AppActivity
    from bench.app_server import free_port

    activity = AppActivity(SimpleNamespace(value=-math.inf), clock=lambda: 42.0)
    with gr.Blocks() as demo:
        box = gr.Textbox()
        box.submit(lambda _: str(activity.last_busy), box, box, api_name="submit")
        box.change(lambda _: str(activity.last_busy), box, box, api_name="chat", concurrency_id=CHAT)
    demo.queue(max_size=8)
    port = free_port()
    demo.launch(server_name="127.0.0.1", server_port=port, prevent_thread_lock=True, quiet=True)
    try:
        share_the_queue(demo, 8, activity)
        client = Client(f"http://127.0.0.1:{port}/", verbose=False)
        assert client.predict("x", api_name="/submit") == "inf"  # busy while it runs
        # the answer reaches the client from inside process_events, so its end is marked a moment later
        deadline = time.monotonic() + 10
        while activity.last_busy != 42.0 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert activity.last_busy == 42.0  # then: when it ended
        assert client.predict("x", api_name="/chat") == "42.0"  # the chat's own event marks nothing
    finally:
        demo.close()
