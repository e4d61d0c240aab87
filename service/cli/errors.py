"""The one exception a command raises to report bad input: printed as a message, never a traceback."""


class CliError(Exception):
    """A user-facing error; the command line prints it and exits with status 2."""
