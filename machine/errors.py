"""User-facing errors: printed as one clear line by run.py, never as a traceback."""


class UserError(Exception):
    """Bad input or a missing prerequisite the user can fix; the message says how."""


class HostUnfit(UserError):
    """This host cannot emulate what was asked within the fidelity tolerances (measured).
    Its own exit code, so that a nightly or CI job tells it from failed runs."""
    exit_code = 4
