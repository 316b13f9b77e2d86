"""Submit-to-next-prompt latency in the real app (`rlhf ui --auth`, over HTTP on 127.0.0.1) with a team ranking at
once: each submit stores the ranking and returns the next prompt, as the Submit button does.

Each simulated annotator logs in, takes a prompt, then submits `rounds` rankings, thinking 0.5x-1.5x `think_s`
before each (real annotators take 10 s or more per ranking of K = 4). The cases (CASES): 20 annotators at 5 s,
100 at 5 s (a labeling team: about 20 submits a second), 20 at 0.5 s (a stress load, about 40 a second), and 100
at 5 s beside one more login that hammers Compare (Hammer: 8 maximal requests at once, again as soon as each is
answered or refused) and one unauthenticated client that guesses logins, a fresh name each second (`guess_logins`:
issue 51; each failed check costs 64 MiB and ~0.2 s of CPU): the caps, the chat's share of the queue
(app/faces/chat_queue.py) and the login budget (app/faces/logins.py) are what keep the others' submits fast.

Keeping the load generator's own CPU out of the measurement:
- It speaks the browser's protocol with plain httpx in one asyncio loop (POST queue/join, then read the SSE stream
  queue/data until the event completes; one login cookie and one kept-alive connection per annotator), not one
  gradio_client per annotator (each a thread pool, a heartbeat stream and a new HTTP client per call).
- The app runs pinned to all cores but the last, the generator (this process) to the last one: on 2 cores, one
  each. The result gives the generator's CPU use as a share of its core (`generator_cpu`; near 1.0 it would be
  the bottleneck, and the figures would measure it).
- Only the ranking rounds are timed: logins and first prompts are done before the clock starts.
- Besides the round trip, each result gives the handler time Gradio reports per event (`duration`: from a worker
  taking the event to the handler's return, so the store's lock wait included, HTTP and the queue excluded) and
  the app's CPU per submit, read from /proc.

`python -m bench.annotation_latency` runs the cases and prints a JSON line for each and a table;
`--annotators 100 --think 5 --rounds 20` runs one case (`--hammer 8` with the hammering login), `--stored 20000`
starts it on a store that already holds that many rankings (a team's store after an hour or two).
`python -m bench.run --only annotation` runs the cases into docs/benchmarks.json and docs/benchmarks.md."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import tempfile
import time
import uuid
from pathlib import Path

import httpx

from annotation.judgement import write_rankings
from bench.app_server import AppServer
from bench.report import annotation_table
from store.db import StoreRef, read, write
from store.prompts import prompt_ids
from store.rankings import RankedItem, RankingIn, source_totals
from store.responses import Sample, add_samples

# (annotators, think time in s, maximal Compare requests one more login keeps sending at once, wrong logins a
# second from one more client, each under a fresh name)
CASES = [(20, 5.0, 0, 0.0), (100, 5.0, 0, 0.0), (20, 0.5, 0, 0.0), (100, 5.0, 8, 1.0)]


def _seed(db: StoreRef, n_prompts: int, k: int) -> None:
    with read(db):
        pass
    with write(db) as con:
        ids = prompt_ids(con, [f"prompt {i}" for i in range(n_prompts)], "bench")
        add_samples(
            con,
            [
                Sample(ids[f"prompt {i}"], f"answer {j} to prompt {i} " * 8, j, 40, "eos", 0)
                for i in range(n_prompts)
                for j in range(k)
            ],
            model_id="bench",
        )


def _preload(db: StoreRef, n: int, k: int) -> None:
    """n rankings already in the store (imported, each with its own prompt and K responses), as a team's store
    holds after a while: the per-submit queries read every response and ranking. Their prompts come after the
    seeded ones, so the run's annotators get seeded prompts first."""
    rankings = [
        RankingIn(
            f"earlier prompt {i}",
            [RankedItem(f"earlier answer {j} to prompt {i} " * 8, j + 1) for j in range(k)],
            "earlier",
            "native",
            f"bench:{i}",
        )
        for i in range(n)
    ]
    with write(db) as con:
        write_rankings(con, rankings)


def split_cores() -> tuple[set[int], set[int]]:
    """(the app's cores, the generator's core): the last core for the generator, the rest for the app."""
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) < 2:
        return set(cores), set(cores)
    return set(cores[:-1]), {cores[-1]}


def _children_cpu_s(pid: int) -> float:
    """CPU seconds of a process's live children (the app's chat child)."""
    total = 0.0
    for children in Path(f"/proc/{pid}/task").glob("*/children"):
        for child in children.read_text().split():
            try:
                total += _cpu_s(int(child))
            except (FileNotFoundError, ProcessLookupError):
                pass
    return total


def _cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process, all its threads."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Annotator:
    """One browser tab: a login cookie, a Gradio session, the prompt on screen."""

    def __init__(self, url: str, name: str, fns: dict[str, int]):
        self.name, self.fns, self.session = name, fns, uuid.uuid4().hex
        # uvicorn closes a connection after 5 s idle, and a request sent on one it is closing fails (a browser
        # sends it again, httpx does not): connections idle for 4 s are dropped here first
        self.http = httpx.AsyncClient(base_url=url, timeout=120, limits=httpx.Limits(keepalive_expiry=4.0))
        self.value: dict = {}

    async def call(
        self, api_name: str, data: list, session: str | None = None, streaming: asyncio.Event | None = None
    ) -> tuple[list, float]:
        """(outputs, handler seconds) of one event, as the page's queue client runs it (session: another page
        session of the same login; streaming: set when the event sends its first partial output)."""
        session = session or self.session
        join = await self.http.post(
            "gradio_api/queue/join", json={"data": data, "fn_index": self.fns[api_name], "session_hash": session}
        )
        join.raise_for_status()
        event_id, done = join.json()["event_id"], None
        async with self.http.stream("GET", "gradio_api/queue/data", params={"session_hash": session}) as sse:
            async for line in sse.aiter_lines():  # read to close_stream, so the connection is kept alive
                msg = json.loads(line[5:]) if line.startswith("data:") else {}
                if streaming is not None and msg.get("msg") == "process_generating":
                    streaming.set()
                if msg.get("msg") == "process_completed" and msg.get("event_id") == event_id:
                    if not msg["success"]:
                        raise RuntimeError(f"{api_name} failed: {msg['output']}")
                    done = msg["output"]["data"], msg["output"]["duration"]
        if done is None:
            raise RuntimeError(f"{api_name}: the stream closed before the event completed")
        return done

    async def start(self) -> None:
        (await self.http.post("login", data={"username": self.name, "password": "pw"})).raise_for_status()
        self.value = (await self.call("annotate_next", [""]))[0][2]

    async def rank(self, rounds: int, think_s: float, out: list, errors: list) -> None:
        rng = random.Random(self.name)
        try:
            await asyncio.sleep(rng.uniform(0, think_s))  # annotators do not start in lockstep
            for _ in range(rounds):
                await asyncio.sleep(rng.uniform(0.5, 1.5) * think_s)
                k = len(self.value["items"])
                ranked = {"items": [{**it, "rank": k - it["pos"]} for it in self.value["items"]]}
                start = time.perf_counter()
                outputs, handler_s = await self.call("annotate_submit", ["", None, ranked, None])
                out.append((time.perf_counter() - start, handler_s))
                self.value = outputs[2]
        except Exception as e:  # noqa: BLE001 - counted and reported
            errors.append(f"{self.name}: {e!r}")
        finally:
            await self.http.aclose()


class Hammer(Annotator):
    """One login sending the biggest Compare requests the server's caps allow (a 4,000-character message, 512 new
    tokens from the default model on both sides), `burst` at once from as many page sessions, again as soon as one
    ends or is refused, until the team is done."""

    MESSAGE = ("Tell me everything you know about rivers, lakes and the sea, in detail. " * 60)[:4000]

    async def hammer(self, stop: asyncio.Event, burst: int, counts: dict, streaming: asyncio.Event) -> None:
        data = [self.MESSAGE, None, "default", "default", False, 0.8, 0.95, 512, 0, "", 1]

        async def one() -> None:
            while not stop.is_set():
                counts["sent"] += 1
                try:
                    await self.call("compare_send", data, session=uuid.uuid4().hex, streaming=streaming)
                    counts["completed"] += 1
                except httpx.HTTPStatusError:
                    counts["refused"] += 1  # the chat's share of the queue is taken: try again soon
                    await asyncio.sleep(0.5)
                except Exception as e:  # noqa: BLE001 - counted and reported
                    counts["failed"] += 1
                    counts.setdefault("first_failure", repr(e)[:200])
                    await asyncio.sleep(0.5)

        await asyncio.gather(*(one() for _ in range(burst)))


async def guess_logins(url: str, per_s: float, stop: asyncio.Event, counts: dict) -> None:
    """A client that is not logged in trying a wrong password under a fresh name `per_s` times a second (a fresh
    name is never locked by the per-name throttle); counts each answer: checked and wrong (400), refused before the
    check by the failure budget (429), anything else."""
    async with httpx.AsyncClient(base_url=url, timeout=120) as http:
        n = 0
        while not stop.is_set():
            n += 1
            answer = await http.post("login", data={"username": f"guess-{n}", "password": "wrong"})
            kind = {400: "checked", 429: "refused"}.get(answer.status_code, "other")
            counts[kind] = counts.get(kind, 0) + 1
            counts["sent"] = n
            try:
                await asyncio.wait_for(stop.wait(), timeout=1 / per_s)
            except TimeoutError:
                pass


async def _team(
    url: str,
    annotators: int,
    rounds: int,
    think_s: float,
    app_pid: int,
    hammer_burst: int = 0,
    login_guesses: float = 0.0,
) -> dict:
    async with httpx.AsyncClient(base_url=url) as admin:
        await admin.post("login", data={"username": "a00", "password": "pw"})
        config = (await admin.get("config")).json()
    fns = {d["api_name"]: d["id"] for d in config["dependencies"] if d.get("api_name")}
    team = [Annotator(url, f"a{i:02d}", fns) for i in range(annotators)]
    await asyncio.gather(*(a.start() for a in team))
    out, errors = [], []
    stop, counts = asyncio.Event(), {"sent": 0, "completed": 0, "refused": 0, "failed": 0}
    hammering = None
    if hammer_burst:
        hammer = Hammer(url, "hammer", fns)
        (await hammer.http.post("login", data={"username": "hammer", "password": "pw"})).raise_for_status()
        streaming = asyncio.Event()
        hammering = asyncio.create_task(hammer.hammer(stop, hammer_burst, counts, streaming))
        # the clock starts once a reply streams: the chat's model loaded and the first long prompt read, as on a
        # server where Compare has been in use (a load and a prompt's first pass are one piece of CPU work each)
        await asyncio.wait_for(streaming.wait(), timeout=600)
    guesses = {"sent": 0, "checked": 0, "refused": 0, "other": 0}
    guessing = asyncio.create_task(guess_logins(url, login_guesses, stop, guesses)) if login_guesses else None
    clock, app_cpu, own_cpu = time.perf_counter(), _cpu_s(app_pid), time.process_time()
    child_cpu = _children_cpu_s(app_pid)
    await asyncio.gather(*(a.rank(rounds, think_s, out, errors) for a in team))
    wall = time.perf_counter() - clock
    stop.set()
    if guessing is not None:
        await guessing
    if hammering is not None:
        stop.set()
        hammering.cancel()
        await asyncio.gather(hammering, return_exceptions=True)
        await hammer.http.aclose()
    return {
        "hammer": counts if hammer_burst else None,
        "login_guesses": guesses if login_guesses else None,
        "out": out,
        "errors": errors,
        "wall_s": wall,
        "app_cpu_s": _cpu_s(app_pid) - app_cpu,
        "chat_cpu_share": (_children_cpu_s(app_pid) - child_cpu) / wall,
        "generator_cpu": (time.process_time() - own_cpu) / wall,
    }


def _stored(db: StoreRef, submits: int, k: int) -> dict:
    """What the app stored in the run. `stored_once`: every acknowledged submit is there exactly once (one ranking
    per task, and per prompt at overlap 1, each with its K items), and nothing else is."""
    with read(db) as con:
        ui = source_totals(con, "ui")
    once = ui.rankings == submits == ui.prompts == ui.keys and ui.items == k * ui.rankings
    return {"stored_rankings": ui.rankings, "distinct_prompts": ui.prompts, "stored_once": once}


def run(
    annotators: int = 20,
    rounds: int = 20,
    think_s: float = 5.0,
    k: int = 4,
    stored: int = 0,
    hammer: int = 0,
    login_guesses: float = 0.0,
) -> dict:
    """One case. stored: rankings already in the store when the run starts; hammer: one more login sends this many
    maximal Compare requests at once throughout (Hammer); login_guesses: wrong logins a second from one more client
    (guess_logins)."""
    app_cores, generator_core = split_cores()
    own_cores = os.sched_getaffinity(0)
    with tempfile.TemporaryDirectory() as tmp:
        db = str(Path(tmp) / "bench.duckdb")
        _seed(db, annotators * rounds + annotators, k)
        _preload(db, stored, k)
        users = Path(tmp) / "users.txt"
        users.write_text("".join(f"a{i:02d}:pw\n" for i in range(annotators)) + "hammer:pw\n")
        users.chmod(0o600)  # rlhf ui refuses a users file others can read
        app = AppServer(db, "--auth", str(users), cpus=app_cores)
        try:
            os.sched_setaffinity(0, generator_core)
            r = asyncio.run(_team(app.url, annotators, rounds, think_s, app.proc.pid, hammer, login_guesses))
        finally:
            os.sched_setaffinity(0, own_cores)
            app.stop()
        stored_now = _stored(db, len(r["out"]), k)
        dashboard = dashboard_s(db)
    latencies = [t for t, _ in r["out"]]
    handler = [h for _, h in r["out"]]
    q, qh = statistics.quantiles(latencies, n=100), statistics.quantiles(handler, n=100)
    return {
        "annotators": annotators,
        "submits": len(latencies),
        "errors": len(r["errors"]),
        "first_error": r["errors"][0] if r["errors"] else None,
        "think_s": think_s,
        "stored_before": stored,
        **stored_now,
        "submits_per_s": len(latencies) / r["wall_s"],
        "p50_ms": 1000 * statistics.median(latencies),
        "p95_ms": 1000 * q[94],
        "max_ms": 1000 * max(latencies),
        "handler_p50_ms": 1000 * statistics.median(handler),
        "handler_p95_ms": 1000 * qh[94],
        "app_cpu_ms_per_submit": 1000 * r["app_cpu_s"] / len(latencies),
        "app_cores": len(app_cores),
        "chat_cpu_share": r["chat_cpu_share"],
        "generator_cpu": r["generator_cpu"],
        **dashboard,
        **({"hammer": r["hammer"]} if hammer else {}),
        **({"login_guesses": r["login_guesses"], "login_guesses_per_s": login_guesses} if login_guesses else {}),
    }


def dashboard_s(db: StoreRef) -> dict:
    """Seconds the Data tab's page load spends on the store after the run (its handlers' work, each the function
    they call: the counts, the annotators' table and plot, the agreement table, the rounds table), on the store as
    the run left it."""
    from annotation.actions import agreement, store_stats
    from annotation.dashboard import annotator_rows, over_time
    from store.rounds import list_rounds

    def rounds(db: StoreRef) -> list:
        with read(db) as con:
            return list_rounds(con)

    times = {}
    parts = [("counts", store_stats), ("annotators", annotator_rows), ("over_time", over_time), ("rounds", rounds)]
    for name, fn in parts:
        t0 = time.perf_counter()
        fn(db)
        times[name] = time.perf_counter() - t0
    t0 = time.perf_counter()
    agreement(db)
    times["agreement"] = time.perf_counter() - t0
    return {"dashboard_s": sum(times.values()), "dashboard_parts_s": times}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--annotators", type=int, help="one case with this many annotators (default: every case)")
    p.add_argument("--think", type=float, default=5.0, help="mean think time in s, with --annotators")
    p.add_argument("--rounds", type=int, default=20, help="rankings per annotator")
    p.add_argument("--stored", type=int, default=0, help="rankings already in the store (a team's store grows)")
    p.add_argument("--hammer", type=int, default=0, help="one more login sends N maximal Compare requests at once")
    p.add_argument("--guess-logins", type=float, default=0.0, help="one more client: wrong logins a second")
    args = p.parse_args()
    rows = []
    cases = [(args.annotators, args.think, args.hammer, args.guess_logins)] if args.annotators else CASES
    for annotators, think_s, hammer, guesses in cases:
        rows.append(run(annotators, args.rounds, think_s, stored=args.stored, hammer=hammer, login_guesses=guesses))
        print(json.dumps(rows[-1]), flush=True)
    print("\n".join(annotation_table(rows)))


if __name__ == "__main__":
    main()
