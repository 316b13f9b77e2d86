"""Logins for `rlhf ui --auth FILE`: the users file (hashed entries, written by `rlhf user add`), the check Gradio
calls on each login (argon2 verification, throttled after repeated failures), and sessions that expire.

The users file holds one `name:secret` line per user; the secret is an argon2id hash (`$argon2id$...`, what
`rlhf user add` writes) or, for old files, the password itself (accepted, with a warning at start). The file must
not be readable by others: the server refuses it otherwise, as ssh refuses a private key."""

from __future__ import annotations

import asyncio
import hmac
import math
import os
import stat
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path

from store.errors import UserError

HASH_PREFIX = "$argon2"
MIN_PASSWORD = 8


@dataclass(frozen=True)
class Users:
    secrets: dict[str, str]  # login -> argon2 hash or plaintext password

    @property
    def plaintext(self) -> list[str]:
        return sorted(u for u, s in self.secrets.items() if not s.startswith(HASH_PREFIX))


def read_users(path: str | os.PathLike) -> Users:
    """The users file, refused if group or others may read or write it, or if a line is not `name:secret`."""
    path = Path(path)
    try:
        mode = path.stat().st_mode
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as e:
        raise UserError(f"cannot read auth file {path}: {e}") from None
    users: dict[str, str] = {}
    for n, line in enumerate(lines, 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        user, sep, secret = line.partition(":")
        if not sep or not user.strip() or not secret:
            raise UserError(f"auth file {path} line {n}: expected user:password")
        users[user.strip()] = secret
    if not users:
        raise UserError(f"auth file {path} has no users")
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise UserError(
            f"auth file {path} can be read by others (mode {stat.filemode(mode)}): run chmod 600 {path} "
            "(it holds every login's password hash)"
        )
    return Users(users)


def hash_password(password: str) -> str:
    from argon2 import PasswordHasher

    return PasswordHasher().hash(password)


def add_user(path: str | os.PathLike, name: str, password: str) -> bool:
    """Write NAME's hashed entry into the users file (created with mode 600; an existing entry replaced), whole or
    not at all. Returns True if NAME was new."""
    path = Path(path)
    name = name.strip()
    if not name or ":" in name or any(c.isspace() for c in name):
        raise UserError(f"a login name has no ':' and no spaces, got {name!r}")
    if len(password) < MIN_PASSWORD:
        raise UserError(f"a password needs at least {MIN_PASSWORD} characters")
    lines = read_users_lines(path)
    entry = f"{name}:{hash_password(password)}"
    new = not any(line.partition(":")[0].strip() == name for line in lines)
    lines = [entry if line.partition(":")[0].strip() == name else line for line in lines] + ([entry] if new else [])
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write("".join(line + "\n" for line in lines))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError as e:
        tmp.unlink(missing_ok=True)
        raise UserError(f"cannot write auth file {path}: {e.strerror or e}") from None
    return new


def read_users_lines(path: Path) -> list[str]:
    if not path.exists():
        return []
    read_users(path)  # the same checks as the server's: mode, shape
    return path.read_text(encoding="utf-8").splitlines()


MAX_TRACKED = 10_000  # names and addresses the throttles remember (the oldest go first): fresh names cost no memory


def _bounded_put(table: OrderedDict, key, value, limit: int = MAX_TRACKED) -> None:
    table[key] = value
    table.move_to_end(key)
    while len(table) > limit:
        table.popitem(last=False)


@dataclass
class FailureBudget:
    """Failed logins allowed per client address and in all, over a sliding window. Over either, the next login is
    refused before its password is checked (a check is 64 MiB and about 0.2 s of CPU): one client trying fresh
    names cannot keep the server's cores busy, and many together cannot either. A success costs nothing.

    The global budget is the guarantee (an attacker behind many addresses, or one that forges X-Forwarded-For
    through a local proxy, still meets it); the per-address one keeps one guesser from using it all up."""

    per_address: int = 10
    total: int = 60
    window_s: float = 300.0
    clock: object = time.monotonic
    max_tracked: int = MAX_TRACKED
    _by_address: OrderedDict = field(default_factory=OrderedDict)
    _all: list[float] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def _recent(self, times: list[float], now: float) -> list[float]:
        return [t for t in times if now - t < self.window_s]

    def wait_s(self, address: str) -> float:
        """Seconds until `address` may try again (0: now)."""
        now = self.clock()
        with self._lock:
            self._all = self._recent(self._all, now)
            mine = self._recent(self._by_address.get(address, []), now)
            waits = [0.0]
            if len(mine) >= self.per_address:
                waits.append(mine[-self.per_address] + self.window_s - now)
            if len(self._all) >= self.total:
                waits.append(self._all[-self.total] + self.window_s - now)
            return max(waits)

    def failed(self, address: str) -> None:
        now = self.clock()
        with self._lock:
            self._all = [*self._recent(self._all, now), now][-self.total :]
            mine = [*self._recent(self._by_address.get(address, []), now), now][-self.per_address :]
            _bounded_put(self._by_address, address, mine, self.max_tracked)


@dataclass
class LoginGate:
    """What Gradio calls with each login's (name, password). After `max_failures` wrong passwords in a row for a
    name, that name is refused without a check for `lock_s` seconds, doubling with each further lockout (up to 15
    minutes): guessing slows to a few tries an hour. A wrong name costs what a wrong password does (a hash check),
    so timing does not tell which names exist.

    The server calls `check` (async): the hash is checked in a worker thread, never on the event loop that answers
    everyone else, `concurrency` at a time. Logins waiting for a turn wait on the loop (no worker thread is held:
    Gradio's handlers share those), at most `max_waiting` of them (more are refused at once: a team of 100 logging
    in together fits); and `budget` counts failures per client address (the Guard refuses a login over it before
    Gradio reads it)."""

    users: Users
    max_failures: int = 5
    lock_s: float = 30.0
    clock: object = time.monotonic
    concurrency: int = 1
    max_waiting: int = 256
    budget: FailureBudget = field(default_factory=FailureBudget)
    max_tracked: int = MAX_TRACKED
    _failures: OrderedDict = field(default_factory=OrderedDict)
    _locked_until: OrderedDict = field(default_factory=OrderedDict)
    _lockouts: OrderedDict = field(default_factory=OrderedDict)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _turns: object = None  # an asyncio.Semaphore, made on the server's loop at the first login
    _waiting: int = 0

    def __call__(self, name: str, password: str) -> bool:
        now = self.clock()
        with self._lock:
            if self._locked_until.get(name, 0.0) > now:
                return False
        ok = _verify(self.users.secrets.get(name), password)
        with self._lock:
            if ok:
                self._failures.pop(name, None)
                self._lockouts.pop(name, None)
                return True
            failures = self._failures.get(name, 0) + 1
            if failures >= self.max_failures:
                n = self._lockouts.get(name, 0)
                _bounded_put(self._locked_until, name, now + min(self.lock_s * 2**n, 900.0), self.max_tracked)
                _bounded_put(self._lockouts, name, n + 1, self.max_tracked)
                failures = 0
            _bounded_put(self._failures, name, failures, self.max_tracked)
            return False

    def locked(self, name: str) -> bool:
        return self._locked_until.get(name, 0.0) > self.clock()

    def refusal(self, address: str):
        """(429, one line) for a login from `address` over the failure budget, else None (the Guard asks)."""
        wait = self.budget.wait_s(address)
        if wait > 0:
            return 429, f"rlhf-studio: too many failed logins; try again in {math.ceil(wait)} s"
        return None

    async def check(self, name: str, password: str) -> bool:
        """Gradio's login hook: the check off the event loop, a few at a time, failures counted to the budget."""
        import anyio

        from app.faces.guard import CLIENT

        address = CLIENT.get()
        if self._turns is None:
            self._turns = asyncio.Semaphore(self.concurrency)
        if self._waiting >= self.max_waiting:  # only the event loop's thread changes it: no lock needed
            self.budget.failed(address)
            return False
        self._waiting += 1
        try:
            async with self._turns:
                ok = await anyio.to_thread.run_sync(self, name, password)
        finally:
            self._waiting -= 1
        if not ok:
            self.budget.failed(address)
        return ok


_DUMMY = None  # a hash to check a wrong name against, made once


def _verify(secret: str | None, password: str) -> bool:
    from argon2 import PasswordHasher
    from argon2.exceptions import Argon2Error, InvalidHashError

    global _DUMMY
    if secret is None:
        _DUMMY = _DUMMY or hash_password("not a password of anyone's")
        secret, password = _DUMMY, password + "\x00"
    if not secret.startswith(HASH_PREFIX):
        return hmac.compare_digest(secret.encode(), password.encode())
    try:
        return PasswordHasher().verify(secret, password)
    except (Argon2Error, InvalidHashError):
        return False


class ExpiringSessions(dict):
    """Gradio's session tokens (token -> login) that end `ttl_s` after the login; Gradio's own never end. Put in
    place of `app.tokens` before anyone logs in; Gradio reads it with get, [] and `in`, and its logout deletes."""

    def __init__(self, ttl_s: float, clock=time.monotonic):
        super().__init__()
        self.ttl_s = ttl_s
        self.clock = clock
        self.issued: dict[str, float] = {}

    def __setitem__(self, token, user):
        for old in [t for t, at in self.issued.items() if self.clock() - at >= self.ttl_s]:
            self._expire(old)  # a login also drops every lapsed session: the table holds live ones only
        self.issued[token] = self.clock()
        super().__setitem__(token, user)

    def keys(self):
        """The live sessions (Gradio's log-out walks them and reads each: a lapsed one must not be among them)."""
        for token in list(super().keys()):
            self._expire(token)
        return super().keys()

    def __iter__(self):
        return iter(list(self.keys()))

    def _expire(self, token) -> None:
        issued = self.issued.get(token)
        if issued is not None and self.clock() - issued >= self.ttl_s:
            self.issued.pop(token, None)
            super().pop(token, None)

    def get(self, token, default=None):
        self._expire(token)
        return super().get(token, default)

    def __getitem__(self, token):
        self._expire(token)
        return super().__getitem__(token)

    def __contains__(self, token):
        self._expire(token)
        return super().__contains__(token)

    def __delitem__(self, token):
        self.issued.pop(token, None)
        super().__delitem__(token)
