"""The Gradio app: composition root for the tabs. Tabs only build components and wire events to plain functions.

Binds 127.0.0.1 unless told otherwise, and refuses any other address without --auth (the store holds every
prompt and ranking; training can be launched from it). In front of Gradio sits app/faces/guard.py (the Host check, the
Origin check, the token without --auth); app/faces/limits.py caps what a request may ask for."""

from __future__ import annotations

import contextlib
import ipaddress
import os
import threading
from pathlib import Path

from annotation.files import MAX_FILE_BYTES
from app.faces.chat_queue import share_the_queue
from app.faces.guard import Uploads
from app.faces.limits import ServeLimits
from app.faces.logins import ExpiringSessions, LoginGate, read_users
from store.db import Store, StoreRef, store_of
from store.errors import UserError
from training.sampling.generation import Sampler, SamplingConfig, VllmSampler, open_sampler


class AppContext:
    """What every session shares: the store (one Store, so the sessions' writers take turns on its lock) and the
    loaded sampling model (loaded on first use)."""

    def __init__(
        self,
        db: Store | str,
        model: str = "default",
        overlap: int = 1,
        auth: bool = False,
        gold_rate: float = 0.0,
        ask_strength: bool = True,
        allow_edits: bool = False,
        sampling: SamplingConfig | None = None,
        runs_dir: str | Path = "runs",
        admins: set[str] | frozenset[str] = frozenset(),
        limits: ServeLimits | None = None,
        chat_process: bool = False,
        allow_private_address: bool = False,
        max_engines: int = 2,
        warm: bool = False,
    ):
        from app.jobs.chat_worker import ChatWorker
        from app.jobs.compare import LocalChat
        from app.jobs.train_view import Runs
        from training.sampling.chat import Models

        self.db = store_of(db)
        self.limits = limits or ServeLimits()  # every size a request may ask for (app/faces/limits.py)
        # the Compare tab's sampling: in a child process at low priority when serving (app/jobs/chat_worker.py), in
        # this one for tests that build the app themselves; models load on first use either way
        n = self.limits.max_chat_models
        self.chat = ChatWorker(n) if chat_process else LocalChat(Models(n))
        # training processes started from the Train tab; starting one frees the app's models for it
        self.runs = Runs(self.db, Path(runs_dir), on_launch=self.release_models)
        self.model = model
        self.sampling = sampling or SamplingConfig(model=model)  # what the Sample button uses
        self.overlap = overlap  # annotators per prompt
        self.gold_rate = gold_rate  # the share of an annotator's new tasks that are gold prompts (store/gold.py)
        # the Annotate tab asks how much better, step by step (annotation/questions/strength.py)
        self.ask_strength = ask_strength
        self.allow_edits = allow_edits  # annotators may correct the best response (store/edits.py)
        self.auth = auth  # logins are the annotator ids
        self.admins = set(admins)  # under auth, only these logins use the Data and Train tabs
        self.allow_private_address = allow_private_address  # the Label Studio pull may reach a private address
        # the sampling engines kept warm, one per sampling config (a model with its settings: the Sample button's,
        # a round's policy), least recently used first; at most max_engines, all freed when a training starts
        self._samplers: dict[str, Sampler | VllmSampler] = {}
        self.max_engines = max(1, max_engines)
        self._retired: list = []  # samplers dropped while in use: closed when their sampling ends
        self._users: dict[int, int] = {}  # samplings running on each sampler, by id
        self._lock = threading.Lock()
        self.warming: threading.Thread | None = None  # an engine starting in the background (warm), for this key:
        self._warming_key: str | None = None
        self._released = 0  # training launches so far (release_models)
        if warm:  # rlhf ui --warm-engine
            self.warm()

    def is_admin(self, request) -> bool:
        """Without --auth the app is one person's (on loopback): everything is theirs. With it, admins only."""
        return not self.auth or getattr(request, "username", None) in self.admins

    def check_admin(self, request) -> None:
        if not self.is_admin(request):
            user = getattr(request, "username", None) or "this login"
            raise UserError(f"{user} is an annotator: the Data and Train tabs are for admins (rlhf ui --admins)")

    def release_models(self) -> None:
        """Free every model the app holds (a training run is starting and needs the memory)."""
        self.chat.release()
        with self._lock:
            self._released += 1  # an engine starting in the background now is closed when it arrives
            self._retire()

    def _retire(self) -> None:
        """Drop every held sampler; each engine closes now, or when the sampling that uses it ends. Under the lock."""
        self._retired += list(self._samplers.values())
        self._samplers.clear()
        self._close_idle()

    def _close_idle(self) -> None:
        for old in [s for s in self._retired if not self._users.get(id(s))]:
            self._retired.remove(old)
            old.close()

    @contextlib.contextmanager
    def sampler(self, config: SamplingConfig):
        """The app's sampler for `config` while the block runs: one engine per config, kept between uses (the Sample
        button, a round's policy: `rlhf ui` pays an engine's start once, not per click). A config beyond
        `max_engines` retires the least recently used one; a training launch retires all; a retired engine closes
        once no sampling uses it. A job waits for its config's engine starting in the background (`warm`) rather
        than start a second.

        A job's size does not choose the engine here, as it does for a command's one job (`rlhf sample`: a small
        one samples with generate on a CPU, training/sampling/vllm_engine.py's too_small): the app's engine is
        started once for every click after, each of which it samples faster than generate."""
        key = repr(config)
        with self._lock:
            warming, warming_key = self.warming, self._warming_key
        if warming is not None and warming_key == key and warming.is_alive():
            warming.join()
        with self._lock:
            sampler = self._samplers.pop(key, None)
            if sampler is None:
                self._make_room()
                sampler = open_sampler(config)
            self._samplers[key] = sampler  # the most recently used last
            self._users[id(sampler)] = self._users.get(id(sampler), 0) + 1
        try:
            yield sampler
        finally:
            with self._lock:
                self._users[id(sampler)] -= 1
                if not self._users[id(sampler)]:
                    del self._users[id(sampler)]
                self._close_idle()

    def _make_room(self) -> None:
        """Retire the least recently used samplers until one more fits (its memory back before the new one loads).
        Under the lock."""
        while len(self._samplers) >= self.max_engines:
            self._retired.append(self._samplers.pop(next(iter(self._samplers))))
        self._close_idle()

    def warm(self, config: SamplingConfig | None = None) -> threading.Thread:
        """Start `config`'s engine (the Sample button's by default) in the background: `rlhf ui --warm-engine` at
        launch, so the first click finds it up. It loads outside the lock and is kept when it is up, unless a job
        opened one meanwhile or a training launched (then it closes); a start that fails is left for the next job,
        which starts it again and says what went wrong, in one line."""
        config = config or self.sampling
        key = repr(config)

        def start() -> None:
            try:
                engine = open_sampler(config)
            except Exception:  # noqa: BLE001 - the next job that opens it says what went wrong, in one line
                return
            with self._lock:
                if key in self._samplers or self._released != released:
                    self._retired.append(engine)  # opened by a job meanwhile, or a training needs the memory
                else:
                    self._make_room()
                    self._samplers[key] = engine
                self._close_idle()

        thread = threading.Thread(target=start, daemon=True, name="warm-engine")
        with self._lock:  # the thread and its key together, for a job that checks them (sampler)
            released = self._released
            self.warming, self._warming_key = thread, key
        thread.start()
        return thread


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def first_tab(db: StoreRef, admin: bool) -> str:
    """The tab a page opens on: Data for an admin while the store has nothing to rank (prompts and sampling are
    there), else Annotate (where an annotator reads what has to happen first)."""
    from app.faces.annotate_tab import empty_store_line

    return "data" if admin and empty_store_line(db, admin) else "annotate"


def build_app(ctx: AppContext):
    import gradio as gr

    from app.faces.annotate_tab import build_annotate_tab
    from app.faces.compare_tab import build_compare_tab
    from app.faces.data_tab import build_data_tab
    from app.faces.train_tab import build_train_tab

    # delete_cache: Gradio deletes the uploads and downloads it cached over --cache-hours ago (a day by default; it
    # keeps them forever otherwise: every pairs download leaves a copy)
    with gr.Blocks(title="rlhf-studio", analytics_enabled=False, delete_cache=ctx.limits.cache_schedule()) as demo:
        with gr.Row():
            gr.Markdown("# rlhf-studio\nRank sampled responses, train a reward model, run PPO, compare.")
            if ctx.auth:  # Gradio's /logout ends this login's sessions and goes back to the login page
                gr.Button("Log out", link="/logout", size="sm", scale=0, min_width=90, elem_id="logout")
        with gr.Tabs() as tabs:
            with gr.Tab("Annotate", id="annotate"):
                build_annotate_tab(ctx, demo)
            # under --auth these two start hidden and are shown to admins on page load (Gradio 6 shows a hidden tab
            # on an update, but does not hide a shown one)
            with gr.Tab("Data", id="data", visible=not ctx.auth) as data_tab:
                build_data_tab(ctx, demo)
            with gr.Tab("Train", id="train", visible=not ctx.auth) as train_tab:
                build_train_tab(ctx, demo)
            with gr.Tab("Compare", id="compare") as compare:
                build_compare_tab(ctx, demo, compare)

        def tabs_for(request):
            """The tab to open on; under --auth also which tabs show (an annotator sees Annotate and Compare; the
            endpoints behind the others refuse them too)."""
            admin = ctx.is_admin(request)
            # only an empty store moves the page (to Data): a page already open on Annotate stays where it is, and
            # a tab the user clicked before this answer came back is not taken away from them
            opened = gr.Tabs(selected="data") if first_tab(ctx.db, admin) == "data" else gr.skip()
            return (opened, gr.Tab(visible=admin), gr.Tab(visible=admin)) if ctx.auth else opened

        tabs_for.__annotations__ = {"request": gr.Request}  # a real class: this module's annotations are strings
        outputs = [tabs, data_tab, train_tab] if ctx.auth else [tabs]
        demo.load(tabs_for, None, outputs, api_visibility="private")
    return demo


def admin_logins(admins: str | None, users) -> set[str]:
    """--admins as a set of logins, each of them in the users file (and none without --auth)."""
    admin_set = {a.strip() for a in (admins or "").split(",") if a.strip()}
    if admin_set and not users:
        raise UserError("--admins needs --auth: without logins everyone using the app is its admin")
    unknown = sorted(admin_set - set(users.secrets if users else ()))
    if unknown:
        raise UserError(f"--admins names {unknown[0]}, who is not in the auth file")
    return admin_set


def launch(
    db: Store | str,
    host: str = "127.0.0.1",
    port: int = 7860,
    auth: str | None = None,
    model: str = "default",
    overlap: int = 1,
    gold_rate: float = 0.0,
    ask_strength: bool = True,
    allow_edits: bool = False,
    runs_dir: str = "runs",
    admins: str | None = None,
    allowed_hosts: str | None = None,
    allowed_origins: str | None = None,
    allow_private_address: bool = False,
    limits: ServeLimits | None = None,
    session_hours: float = 12.0,
    ssl_keyfile: str | None = None,
    ssl_certfile: str | None = None,
    warm_engine: bool = False,
):
    quiet_gradio()
    users = read_users(auth) if auth else None
    check_serving(host, users, bool(ssl_keyfile), bool(ssl_certfile), session_hours)
    admin_set = admin_logins(admins, users)
    check_shares(overlap, gold_rate)
    (limits := limits or ServeLimits()).cache_schedule()  # a bad --cache-hours is one line before anything starts
    boundary = serving_boundary(host, port, allowed_hosts, not users, allowed_origins, bool(ssl_certfile))
    uploads = Uploads(bool(users), frozenset(admin_set), limits.max_upload_mb_per_hour)
    gate = LoginGate(users) if users else None
    private_gradio_cache()
    store = store_of(db).hold()  # open while serving, passed down; CLI commands still get their turn (store/db.py)
    ctx = AppContext(
        store,
        model,
        overlap=overlap,
        gold_rate=gold_rate,
        ask_strength=ask_strength,
        allow_edits=allow_edits,
        auth=bool(users),
        runs_dir=runs_dir,
        admins=admin_set,
        limits=limits,
        chat_process=True,
        allow_private_address=allow_private_address,
        warm=warm_engine,
    )
    demo = build_app(ctx)
    demo.queue(default_concurrency_limit=8, max_size=limits.max_queue)
    share_the_queue(demo, limits.max_queue, ctx.chat.activity)
    announce(boundary, "https" if ssl_certfile else "http", host, port, users, auth)
    serve(
        demo,
        host,
        port,
        gate,
        (ssl_keyfile, ssl_certfile),
        guard_middleware(boundary, uploads, limits.max_request_kb * 1024, gate),
        sessions_expire(session_hours, uploads),
    )


def quiet_gradio() -> None:
    os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
    # After every event Gradio's queue rebuilds a pandas summary of up to 10,000 past events for its monitoring page
    # (unused here): 1-5 ms of CPU per submit, growing with uptime. Once every 1,000 events is plenty.
    os.environ.setdefault("GRADIO_ANALYTICS_CACHE_FREQUENCY", "1000")


def check_shares(overlap: int, gold_rate: float) -> None:
    if overlap < 1:
        raise UserError(f"--overlap must be at least 1, got {overlap}")
    if not 0 <= gold_rate <= 0.5:
        raise UserError(f"--gold-rate must be from 0 to 0.5 (a share of the tasks), got {gold_rate}")


def serve(demo, host: str, port: int, gate, ssl: tuple[str | None, str | None], middleware, lifespan) -> None:
    """Gradio's server for the built app, behind the guard middleware (app/faces/guard.py) and with the sessions'
    expiry as its lifespan."""
    ssl_keyfile, ssl_certfile = ssl
    demo.launch(
        server_name=host,
        server_port=port,
        auth=gate.check if gate else None,  # async: the hash is checked off the event loop
        # a user's mistake is a gr.Error with its one line (app/faces/handlers.py); anything else shows as a bare
        # "Error" and its text goes only to the log: an annotator reads no exception text or server path
        show_error=False,
        max_file_size=MAX_FILE_BYTES,  # Gradio stops reading an upload past it (HTTP 413)
        footer_links=[],
        ssl_keyfile=ssl_keyfile,
        ssl_certfile=ssl_certfile,
        ssl_verify=False,  # only Gradio's check of its own loopback address, which a self-signed certificate fails
        app_kwargs={"middleware": [middleware], "lifespan": lifespan},
    )


def check_serving(host: str, users, ssl_key: bool, ssl_cert: bool, session_hours: float) -> None:
    """One line for a server that would be open to the network, or half-configured, before anything starts."""
    if not is_loopback(host) and not users:
        raise UserError(f"refusing to listen on {host} without --auth: anyone on the network could read the store")
    if ssl_key != ssl_cert:
        raise UserError("TLS takes both --ssl-keyfile and --ssl-certfile")
    if session_hours <= 0:
        raise UserError(f"--session-hours must be above 0, got {session_hours}")


def announce(boundary, scheme: str, host: str, port: int, users, auth: str | None) -> None:
    """The address to open (with its token when there are no logins), and a warning for plaintext passwords."""
    if boundary.token is not None:
        shown = "127.0.0.1" if host in ("0.0.0.0", "::") else host
        print(f"* rlhf-studio: open {scheme}://{shown}:{port}/?token={boundary.token}", flush=True)
    if users and users.plaintext:
        print(
            f"* rlhf-studio: {len(users.plaintext)} login(s) in {auth} have a plaintext password "
            f"({', '.join(users.plaintext[:3])}): replace each with `rlhf user add NAME --file {auth}`",
            flush=True,
        )


def serving_boundary(
    host: str, port: int, allowed_hosts: str | None, token: bool, origins: str | None = None, tls: bool = False
):
    """What app/faces/guard.py lets through: the Host names, the origins besides the app's own, and the token (only
    without --auth)."""
    from app.faces.guard import Boundary, allowed_origins, new_token
    from app.faces.guard import allowed_hosts as hosts_for

    extra = [h for h in (allowed_hosts or "").split(",") if h.strip()]
    try:
        pages = allowed_origins((origins or "").split(","))
    except ValueError as e:
        raise UserError(str(e)) from None
    return Boundary(hosts_for(host, extra), new_token() if token else None, port, pages, tls)


def private_gradio_cache() -> None:
    """Gradio keeps uploads and its copies of downloads in GRADIO_TEMP_DIR, by default /tmp/gradio, which every
    local user can read: point it at the process's private folder (app/faces/private_files.py), or check the one
    the user chose."""
    from app.faces.private_files import checked_dir, private_root

    chosen = os.environ.get("GRADIO_TEMP_DIR")
    os.environ["GRADIO_TEMP_DIR"] = str(checked_dir(Path(chosen) if chosen else private_root() / "gradio"))


def sessions_expire(hours: float, uploads=None):
    """A lifespan hook that puts expiring sessions in place of Gradio's login tokens before the first request, and
    hands the upload policy the server app (whose tokens say who is logged in)."""
    from contextlib import asynccontextmanager

    from app.faces.guard import outermost

    @asynccontextmanager
    async def lifespan(app):
        outermost(app)  # the guard before Gradio's CORS middleware
        app.tokens = ExpiringSessions(hours * 3600)
        if uploads is not None:
            uploads.app = app
        yield

    return lifespan


def guard_middleware(boundary, uploads=None, max_body: int = 1 << 20, logins=None):
    from starlette.middleware import Middleware

    from app.faces.guard import Guard

    return Middleware(Guard, boundary=boundary, uploads=uploads, max_body=max_body, logins=logins)
