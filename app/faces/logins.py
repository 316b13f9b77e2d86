"""Logins for `rlhf ui --auth FILE`: the users file (hashed entries, written by `rlhf user add`), the check Gradio
calls on each login (argon2 verification, throttled after repeated failures), and sessions that expire.

The users file holds one `name:secret` line per user; the secret is an argon2id hash (`$argon2id$...`, what
`rlhf user add` writes) or, for old files, the password itself (accepted, with a warning at start). The file must
not be readable by others: the server refuses it otherwise, as ssh refuses a private key."""

from __future__ import annotations

import hmac
import os
import stat
import threading
import time
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


@dataclass
class LoginGate:
    """What Gradio calls with each login's (name, password). After `max_failures` wrong passwords in a row for a
    name, that name is refused without a check for `lock_s` seconds, doubling with each further lockout (up to 15
    minutes): guessing slows to a few tries an hour. A wrong name costs what a wrong password does (a hash check),
    so timing does not tell which names exist."""

    users: Users
    max_failures: int = 5
    lock_s: float = 30.0
    clock: object = time.monotonic
    _failures: dict[str, int] = field(default_factory=dict)
    _locked_until: dict[str, float] = field(default_factory=dict)
    _lockouts: dict[str, int] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

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
            self._failures[name] = self._failures.get(name, 0) + 1
            if self._failures[name] >= self.max_failures:
                n = self._lockouts.get(name, 0)
                self._locked_until[name] = now + min(self.lock_s * 2**n, 900.0)
                self._lockouts[name] = n + 1
                self._failures[name] = 0
            return False

    def locked(self, name: str) -> bool:
        return self._locked_until.get(name, 0.0) > self.clock()


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
        self.issued[token] = self.clock()
        super().__setitem__(token, user)

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
