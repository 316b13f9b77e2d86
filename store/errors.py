"""The one exception type the CLI and the app turn into a single clear line for the user."""


class StoreError(Exception):
    """A user-facing failure: bad input, a busy or missing store. str(e) is the whole message."""


class StoreBusy(StoreError):
    """Another process holds the database file."""
