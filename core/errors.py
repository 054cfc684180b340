"""One exception type for everything a user can get wrong, so front ends can show it without a traceback."""


class InputError(ValueError):
    """Bad input: the message says what is wrong and how to fix it."""
