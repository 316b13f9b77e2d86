"""The one exception type the CLI and the app turn into a single clear line for the user."""


class UserError(Exception):
    """Something the user can fix: bad input (a prompt file, a ranking, a Label Studio export or config, an auth
    file, a setting), a missing or busy store. str(e) is the whole message, shown as one line."""


class StoreBusy(UserError):
    """Another process holds the database file."""
