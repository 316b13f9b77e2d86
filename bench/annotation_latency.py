"""Submit-to-next-prompt latency in the real app (`rlhf ui --auth`, over HTTP on 127.0.0.1) with 20 annotators
ranking at once: each submit stores the ranking and returns the next prompt, as the Submit button does.

Each simulated annotator logs in with gradio_client, takes a prompt, then submits `rounds` rankings, thinking
0.5x-1.5x `think_s` before each (real annotators take 10 s or more per ranking of K = 4). Two loads: think 5 s
(20 busy annotators) and think 0.5 s (a stress load that saturates the 2 cores, load generator included)."""

from __future__ import annotations

import random
import statistics
import tempfile
import threading
import time
from pathlib import Path

from gradio_client import Client

from store.db import connect, write
from store.prompts import prompt_ids
from store.responses import Sample, add_samples
from tests.app_server import AppServer


def _seed(db: str, n_prompts: int, k: int) -> None:
    with connect(db):
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


def _annotator(url: str, name: str, rounds: int, think_s: float, out: list, errors: list) -> None:
    rng = random.Random(name)
    try:
        client = Client(url, auth=(name, "pw"), verbose=False)
        _, value, *_ = client.predict("", api_name="/annotate_next")
        time.sleep(rng.uniform(0, think_s))  # annotators do not start in lockstep
        for _ in range(rounds):
            time.sleep(rng.uniform(0.5, 1.5) * think_s)
            k = len(value["items"])
            ranked = {"items": [{**it, "rank": k - it["pos"]} for it in value["items"]]}
            start = time.perf_counter()
            _, value, *_ = client.predict("", ranked, api_name="/annotate_submit")
            out.append(time.perf_counter() - start)
    except Exception as e:  # noqa: BLE001 - counted and reported
        errors.append(repr(e))


def run(annotators: int = 20, rounds: int = 20, think_s: float = 5.0, k: int = 4) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        db = str(Path(tmp) / "bench.duckdb")
        _seed(db, annotators * rounds + annotators, k)
        users = Path(tmp) / "users.txt"
        users.write_text("".join(f"a{i:02d}:pw\n" for i in range(annotators)))
        app = AppServer(db, "--auth", str(users))
        latencies, errors = [], []
        try:
            threads = [
                threading.Thread(target=_annotator, args=(app.url, f"a{i:02d}", rounds, think_s, latencies, errors))
                for i in range(annotators)
            ]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
        finally:
            app.stop()
        with connect(db) as con:
            stored = con.execute("SELECT count(*), count(DISTINCT prompt_id) FROM rankings").fetchone()
    q = statistics.quantiles(latencies, n=100)
    return {
        "annotators": annotators,
        "submits": len(latencies),
        "errors": len(errors),
        "think_s": think_s,
        "stored_rankings": stored[0],
        "distinct_prompts": stored[1],
        "p50_ms": 1000 * statistics.median(latencies),
        "p95_ms": 1000 * q[94],
        "max_ms": 1000 * max(latencies),
    }
