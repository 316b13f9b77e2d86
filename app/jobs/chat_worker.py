"""The Compare tab's sampling and scoring in a child process at the lowest CPU priority (`nice` 10 and, on Linux,
the SCHED_IDLE policy: it runs on CPU time no other process wants).

Why a process: a reply being sampled is CPU work the size of a whole core (and the GIL's between torch ops). In the
app's process it took an equal share of the CPU from everyone's submits: with 100 annotators and one login sending
maximal Compare requests, submit p95 was 18-24 s against 150 ms without it (bench/annotation_latency.py). In its own
process at nice 10 it got about a tenth of a busy core (submit p95 0.8 s beside it, 0.2 s without); under
SCHED_IDLE it gets next to none of a busy core, and all of an idle one; the app keeps its GIL. Its torch threads
are as many as the cores it may run on (torch counts the machine's cores, not the process's).

SCHED_IDLE gives the app the CPU, not its caches: a decode step streams the model's weights through them, and the
app's next handler runs slower on what is left. With 100 annotators at 5 s beside a login sending maximal Compare
requests, on one core, the app spent 35.9 ms of CPU per submit (p95 332 ms) with the child sampling against 25.4 ms
(p95 80 ms) with it stopped. So the child also yields to a busy app: while the app handles any other event, or has
handled one in the last QUIET_S (`AppActivity`: a time shared with the child), the child waits after each step for
as long as makes its CPU BUSY_SHARE of the time (a step of 0.1 s CPU: 0.9 s), at most YIELD_MAX_S. A chat on a busy
server advances slowly, never not at all, and on a quiet one at full speed. (The chat's models are on the CPU:
training/sampling/chat.py loads them there. The first model on vLLM runs its engine inside this process, so a step is
still this process's CPU, at its priority, and yields the same way; a second vLLM model at the same time runs its
engine in processes of its own (training/sampling/vllm_engine.py: one engine per process), which inherit this
process's priority and SCHED_IDLE but step on their own, outside the yield.)

One request at a time, in arrival order (the chat's events run one at a time anyway: app/faces/chat_queue.py). Requests
and their frames travel over one pipe, each tagged with its id; a reader thread hands frames to the request's
queue, so an abandoned stream (the page's Stop, a closed tab) never blocks the next. `release()` ends the process
(a training run needs the memory); the next request starts a fresh one (a few seconds: torch's import)."""

from __future__ import annotations

import collections
import itertools
import math
import multiprocessing as mp
import os
import queue
import threading
import time
from collections.abc import Callable, Iterator

from store.errors import UserError
from training.models import ModelError

NICE = 10
# the child sends the latest texts at most this often (and always the last): a frame costs the app's process a
# Gradio update of both chats, and a token is a frame otherwise (most of the app's CPU while a reply streamed)
FRAME_S = 0.25
ERRORS = {"UserError": UserError, "ModelError": ModelError, "ValueError": ValueError}
QUIET_S = 0.3  # the app is busy until it has handled no other event for this long
BUSY_SHARE = 0.1  # the child's share of the time while the app is busy
YIELD_MAX_S = 5.0  # the longest wait after one step
GONE = "the chat process ended (a training run may have started, freeing its memory); send the message again"


def wait_budget_s(step_cpu_s: float, share: float = BUSY_SHARE, cap: float = YIELD_MAX_S) -> float:
    """The longest wait after a step that took step_cpu_s of CPU, so that step and wait give the child `share` of
    the time: 0.1 s at share 0.1 -> 0.9 s; at most cap."""
    return min(step_cpu_s * (1 - share) / share, cap)


def keep_waiting(last_busy: float, now: float, end: float, quiet_s: float = QUIET_S) -> bool:
    """Whether the child, waiting after a step until `end`, waits on: the app has been busy within quiet_s
    (last_busy: when its last other event ended, +inf while one runs)."""
    return now < end and now - last_busy < quiet_s


def _yield_to_app(busy, step_cpu_s: float) -> bool:
    """Wait after a step (in short sleeps, re-reading the shared time) while the app is busy, within the step's
    budget; True if it waited at all."""
    now = time.monotonic()
    end = now + wait_budget_s(step_cpu_s)
    waited = False
    while keep_waiting(busy.value, now, end):
        waited = True
        time.sleep(min(0.05, end - now))
        now = time.monotonic()
    return waited


class AppActivity:
    """The app's side of the yield: `begin` and `end` around each event that is not the chat's. The shared time
    (`last_busy`) is +inf while any runs, then when the last one ended."""

    def __init__(self, value, clock=time.monotonic):
        self._value, self._clock = value, clock
        self._running = 0
        self._lock = threading.Lock()

    def begin(self) -> None:
        with self._lock:
            self._running += 1
            self._value.value = math.inf

    def end(self) -> None:
        with self._lock:
            self._running -= 1
            if self._running <= 0:
                self._running = 0
                self._value.value = self._clock()

    @property
    def last_busy(self) -> float:
        return self._value.value


def _serve(conn, max_loaded: int, nice: int, busy=None) -> None:
    """The child: requests (id, kind, args) in; ("frame" | "done" | "error", id, ...) out; ("cancel", id) stops
    the stream with that id (or drops the request if it has not started). busy: the app's shared AppActivity time
    (None: never wait). A pair's "done" carries its steps and how many of them waited for the app."""
    os.nice(nice)
    if hasattr(os, "SCHED_IDLE"):  # Linux: CPU nobody else wants, only (nice alone still took a tenth of a busy
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))  # core, and the submits queued behind it)
    import torch

    torch.set_num_threads(len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else torch.get_num_threads())
    from app.jobs.compare import LocalChat
    from training.sampling.chat import Models

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
                _stream_pair(conn, chat, rid, args, busy, read_ahead, cancelled)
            elif kind == "scores":
                conn.send(("done", rid, chat.scores(*args)))
        except Exception as e:  # noqa: BLE001 - every failure goes back to the caller as its one line
            name = type(e).__name__ if type(e).__name__ in ERRORS else "Exception"
            conn.send(("error", rid, name, str(e) if name != "Exception" else f"{type(e).__name__}: {e}"))
        cancelled.discard(rid)


def _stream_pair(conn, chat, rid, args, busy, read_ahead: Callable[[], None], cancelled: set) -> None:
    """One pair's replies as frames (at most one every FRAME_S, the last always), yielding to the app between steps
    and stopping at a cancel; then "done" with its steps, how many waited, and the engines that answered."""
    sent, latest, steps, waited, cpu = 0.0, None, 0, 0, time.process_time()
    for latest in chat.pair(*args):
        steps += 1
        if busy is not None and _yield_to_app(busy, time.process_time() - cpu):
            waited += 1
        cpu = time.process_time()
        if time.monotonic() - sent >= FRAME_S:
            conn.send(("frame", rid, latest))
            sent, latest = time.monotonic(), None
        read_ahead()
        if rid in cancelled:
            break
    if latest is not None and rid not in cancelled:
        conn.send(("frame", rid, latest))
    conn.send(("done", rid, {"steps": steps, "waited": waited, "engines": chat.last_engines}))


class ChatWorker:
    """The app's end: `pair` and `scores` as LocalChat has them, run in the child."""

    def __init__(self, max_loaded: int = 3, nice: int = NICE):
        self.max_loaded, self.nice = max_loaded, nice
        self._proc = None
        self._conn = None
        self._queues: dict[int, queue.Queue] = {}
        self._ids = itertools.count()
        self._lock = threading.Lock()  # starting, sending, stopping
        self._busy = mp.get_context("spawn").RawValue("d", -math.inf)  # shared with every child this worker starts
        self.activity = AppActivity(self._busy)  # the app marks its other events (app/faces/chat_queue.py)
        self.last_pair: dict | None = None  # the last finished pair's steps, waits and engines

    def _start(self):
        """The child and its reader thread, started on first use (and again after `release`)."""
        if self._proc is not None and self._proc.is_alive():
            return self._conn
        ctx = mp.get_context("spawn")  # never fork a process that holds threads and a store connection
        parent, child = ctx.Pipe()
        args = (child, self.max_loaded, self.nice, self._busy)
        self._proc = ctx.Process(target=_serve, args=args, daemon=True, name="chat")
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
                self.last_pair = msg[2]
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
