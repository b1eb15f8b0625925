"""User-facing errors: one line naming the field, the value and what is allowed."""
from __future__ import annotations


class UserInputError(ValueError):
    """A mistake in what the user asked for. The CLI prints it as one line and exits 2."""

    def __init__(self, field: str, value: object, allowed: str):
        self.field, self.value, self.allowed = field, value, allowed
        head = f"{clip_middle(field, 100)}: got {clip(repr(value), 120)}; allowed: "
        super().__init__(head + clip(allowed, max(120, MESSAGE_CHARS - len(head))))


MESSAGE_CHARS = 460
"""Longest error message (the CLI adds 'autotune: error: '): one line under 500 characters."""


def clip(text: str, n: int) -> str:
    """``text`` cut to about n characters, saying how long it was: a one-line error stays one
    short line whatever the user typed (a 400-digit number, a 2 MB value)."""
    text = str(text).replace("\n", "\\n").replace("\r", "\\r")
    return text if len(text) <= n else f"{text[:n]}...({len(text)} characters)"


def clip_middle(text: str, n: int) -> str:
    """``text`` cut to about n characters in the middle: a field ends in its most specific part
    (``--params <a long path>: <the key>``), so its start and its end are kept."""
    text = str(text).replace("\n", "\\n").replace("\r", "\\r")
    if len(text) <= n:
        return text
    tail = (2 * n) // 3
    return f"{text[:n - tail]}...({len(text)} characters)...{text[-tail:]}"


def from_pydantic(exc, prefix: str = "") -> UserInputError:
    """Turn the first error of a pydantic ValidationError into a UserInputError."""
    err = exc.errors()[0]
    loc = ".".join(str(p) for p in err.get("loc", ()) if p != "__root__")
    field = ".".join(p for p in (prefix, loc) if p) or prefix or "input"
    value = err.get("input")
    if isinstance(value, dict):
        value = "{...}"
    msg = err.get("msg", "invalid")
    orig = (err.get("ctx") or {}).get("error")
    if isinstance(orig, UserInputError):      # a validator's own one-line error: kept, not wrapped twice
        return UserInputError(field if loc else ".".join(p for p in (prefix, orig.field) if p), orig.value,
                              orig.allowed)
    if err.get("type") == "value_error":      # a validator's own message: pydantic prefixes "Value error, "
        msg = msg.removeprefix("Value error, ")
    if err.get("type") == "extra_forbidden":
        msg = "unknown key (check the spelling)"
    return UserInputError(field, value, msg)


def rule_of(exc: Exception) -> str:
    """What a rejected value must be, in pydantic's words for its first error ("Input should be
    greater than or equal to 0"); the exception's type name where it is not a ValidationError."""
    errors = getattr(exc, "errors", None)
    try:
        msg = errors()[0].get("msg", "") if callable(errors) else ""
    except Exception:  # noqa: BLE001 - not pydantic's ValidationError after all
        msg = ""
    return msg.removeprefix("Value error, ").removeprefix("Input should be ") or type(exc).__name__


class StorageCorrupt(RuntimeError):
    """A storage or tracking file that exists but is not a healthy SQLite database (empty,
    another kind of file, or failing SQLite's quick_check). The CLI prints it as one line and exits
    3; nothing is started over silently."""

    def __init__(self, option: str, path: str, what: str):
        self.option, self.path = option, path
        super().__init__(f"{option} {clip(path, 200)}: {what}")


class ServiceUnavailable(RuntimeError):
    """A storage or tracking service that went away and stayed away through bounded retries.
    The CLI prints it as one line and exits 3; every trial committed before is kept, and the
    study resumes by name once the service is back."""

    def __init__(self, option: str, uri: str, attempts: int, cause: str, hint: str = ""):
        self.option, self.uri = option, uri
        super().__init__(f"{option} {uri}: unreachable after {attempts} attempts ({cause})"
                         + (f"; {hint}" if hint else ""))
