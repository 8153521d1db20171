"""User-facing errors: printed as one clear line by run.py, never as a traceback."""


class UserError(Exception):
    """Bad input or a missing prerequisite the user can fix; the message says how."""
