"""One exception for every mistake a user can fix: the CLI prints its message on one line and exits
2."""


class UserError(Exception):
    """Bad input (file, name, number). The message says what is wrong and what to do."""
