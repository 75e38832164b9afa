"""Errors a user can cause (bad files, unknown envs); the CLI prints them as one line."""


class UserError(Exception):
    """A mistake in what the user asked for: reported as one line, exit code 2."""


class PolicyFileError(UserError):
    """The file is not a readable edge-rl policy."""
