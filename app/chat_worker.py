"""The Compare tab's sampling and scoring in a child process at the lowest CPU priority (`nice` 10 and, on Linux,
the SCHED_IDLE policy: it runs on CPU time no other process wants).

Why a process: a reply being sampled is CPU work the size of a whole core (and the GIL's between torch ops). In the
app's process it took an equal share of the CPU from everyone's submits: with 100 annotators and one login sending
maximal Compare requests, submit p95 was 18-24 s against 150 ms without it (bench/annotation_latency.py). In its own
process at nice 10 it got about a tenth of a busy core (submit p95 0.8 s beside it, 0.2 s without); under
SCHED_IDLE it gets next to none of a busy core, and all of an idle one; the app keeps its GIL. Its torch threads
are as many as the cores it may run on (torch counts the machine's cores, not the process's).

One request at a time, in arrival order (the chat's events run one at a time anyway: app/chat_queue.py). Requests
and their frames travel over one pipe, each tagged with its id; a reader thread hands frames to the request's
queue, so an abandoned stream (the page's Stop, a closed tab) never blocks the next. `release()` ends the process
(a training run needs the memory); the next request starts a fresh one (a few seconds: torch's import)."""

from __future__ import annotations

import collections
import itertools
import multiprocessing as mp
import os
import queue
import threading
import time
from collections.abc import Iterator

from store.errors import UserError
from training.models import ModelError

NICE = 10
# the child sends the latest texts at most this often (and always the last): a frame costs the app's process a
# Gradio update of both chats, and a token is a frame otherwise (most of the app's CPU while a reply streamed)
FRAME_S = 0.25
ERRORS = {"UserError": UserError, "ModelError": ModelError, "ValueError": ValueError}
GONE = "the chat process ended (a training run may have started, freeing its memory); send the message again"


def _serve(conn, max_loaded: int, nice: int) -> None:
    """The child: requests (id, kind, args) in; ("frame" | "done" | "error", id, ...) out; ("cancel", id) stops
    the stream with that id (or drops the request if it has not started)."""
    os.nice(nice)
    if hasattr(os, "SCHED_IDLE"):  # Linux: CPU nobody else wants, only (nice alone still took a tenth of a busy
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))  # core, and the submits queued behind it)
    import torch

    torch.set_num_threads(len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else torch.get_num_threads())
    from app.compare import LocalChat
    from training.chat import Models

    chat, cancelled, inbox = LocalChat(Models(max_loaded)), set(), collections.deque()

    def read_ahead() -> None:
        """While a stream runs: note cancels, keep later requests in line."""
        while conn.poll():
            msg = conn.recv()
            if msg[0] == "cancel":
                cancelled.add(msg[1])
            else:
                inbox.append(msg)

    while True:
        try:
            msg = inbox.popleft() if inbox else conn.recv()
        except (EOFError, OSError):
            return
        if msg[0] == "cancel":
            cancelled.add(msg[1])
            continue
        rid, kind, args = msg
        if rid in cancelled:
            cancelled.discard(rid)
            continue
        try:
            if kind == "pair":
                sent, latest = 0.0, None
                for latest in chat.pair(*args):
                    if time.monotonic() - sent >= FRAME_S:
                        conn.send(("frame", rid, latest))
                        sent, latest = time.monotonic(), None
                    read_ahead()
                    if rid in cancelled:
                        break
                if latest is not None and rid not in cancelled:
                    conn.send(("frame", rid, latest))
                conn.send(("done", rid, None))
            elif kind == "scores":
                conn.send(("done", rid, chat.scores(*args)))
        except Exception as e:  # noqa: BLE001 - every failure goes back to the caller as its one line
            name = type(e).__name__ if type(e).__name__ in ERRORS else "Exception"
            conn.send(("error", rid, name, str(e) if name != "Exception" else f"{type(e).__name__}: {e}"))
        cancelled.discard(rid)


class ChatWorker:
    """The app's end: `pair` and `scores` as LocalChat has them, run in the child."""

    def __init__(self, max_loaded: int = 3, nice: int = NICE):
        self.max_loaded, self.nice = max_loaded, nice
        self._proc = None
        self._conn = None
        self._queues: dict[int, queue.Queue] = {}
        self._ids = itertools.count()
        self._lock = threading.Lock()  # starting, sending, stopping

    def _start(self):
        """The child and its reader thread, started on first use (and again after `release`)."""
        if self._proc is not None and self._proc.is_alive():
            return self._conn
        ctx = mp.get_context("spawn")  # never fork a process that holds threads and a store connection
        parent, child = ctx.Pipe()
        self._proc = ctx.Process(target=_serve, args=(child, self.max_loaded, self.nice), daemon=True, name="chat")
        self._proc.start()
        child.close()
        self._conn, self._queues = parent, {}  # this child's requests: its reader tells them if it goes
        threading.Thread(target=self._read, args=(parent, self._queues), daemon=True, name="chat-reader").start()
        return parent

    @staticmethod
    def _read(conn, queues: dict) -> None:
        """Hand each message to its request's queue; when the child goes, tell every request still waiting."""
        while True:
            try:
                msg = conn.recv()
            except (EOFError, OSError):
                break
            q = queues.get(msg[1])
            if q is not None:
                q.put(msg)
        for q in list(queues.values()):
            q.put(("error", None, "ModelError", GONE))

    def _ask(self, kind: str, args: tuple) -> tuple[int, queue.Queue, dict]:
        with self._lock:
            conn = self._start()
            rid, queues = next(self._ids), self._queues
            q = queues[rid] = queue.Queue()
            conn.send((rid, kind, args))
        return rid, q, queues

    def pair(self, sides, histories, params, reward: str = "") -> Iterator[tuple[str, str]]:
        rid, q, queues = self._ask("pair", (sides, histories, params, reward))
        finished = False
        try:
            while True:
                msg = q.get()
                if msg[0] == "frame":
                    yield msg[2]
                    continue
                finished = True
                if msg[0] == "error":
                    raise ERRORS.get(msg[2], ModelError)(msg[3])
                return
        finally:
            queues.pop(rid, None)
            if not finished:  # the page stopped reading: stop sampling for it
                with self._lock:
                    if self._conn is not None:
                        try:
                            self._conn.send(("cancel", rid))
                        except OSError:
                            pass

    def scores(self, reward: str, contexts, replies) -> tuple[float, float]:
        rid, q, queues = self._ask("scores", (reward, contexts, replies))
        try:
            msg = q.get()
        finally:
            queues.pop(rid, None)
        if msg[0] == "error":
            raise ERRORS.get(msg[2], ModelError)(msg[3])
        return msg[2]

    def release(self) -> int:
        """End the child (and free every model it holds); returns 1 if one was running."""
        with self._lock:
            proc, self._proc, self._conn = self._proc, None, None
        if proc is None or not proc.is_alive():
            return 0
        proc.terminate()
        proc.join(timeout=10)
        return 1

    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None and self._proc.is_alive() else None
