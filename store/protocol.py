"""What the store's functions ask of a database connection: the small part of the Python DB-API that DuckDB's
connection implements and every store function uses (execute, executemany, fetchone, fetchall). Store functions are
typed to it rather than to DuckDB's class, so a second backend is a class with these methods (and the SQL dialect
the queries speak): tests/test_store_backends.py runs the store's suite on an in-memory DuckDB as the second one.
The one place that opens connections and transactions is store/db.py (`Store.read`, `Store.write`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol


class Connection(Protocol):
    def execute(self, query: str, parameters: Sequence[Any] | dict | None = None) -> Connection: ...

    def executemany(self, query: str, parameters: Sequence[Any] | None = None) -> Connection: ...

    def fetchone(self) -> tuple | None: ...

    def fetchall(self) -> list[tuple]: ...

    def close(self) -> None: ...
