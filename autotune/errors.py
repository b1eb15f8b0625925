"""User-facing errors: one line naming the field, the value and what is allowed."""
from __future__ import annotations


class UserInputError(ValueError):
    """A mistake in what the user asked for. The CLI prints it as one line and exits 2."""

    def __init__(self, field: str, value: object, allowed: str):
        self.field, self.value, self.allowed = field, value, allowed
        super().__init__(f"{field}: got {value!r}; allowed: {allowed}")


def from_pydantic(exc, prefix: str = "") -> UserInputError:
    """Turn the first error of a pydantic ValidationError into a UserInputError."""
    err = exc.errors()[0]
    loc = ".".join(str(p) for p in err.get("loc", ()) if p != "__root__")
    field = ".".join(p for p in (prefix, loc) if p) or prefix or "input"
    value = err.get("input")
    if isinstance(value, dict):
        value = "{...}"
    msg = err.get("msg", "invalid")
    if err.get("type") == "extra_forbidden":
        msg = "unknown key (check the spelling)"
    return UserInputError(field, value, msg)


class ServiceUnavailable(RuntimeError):
    """A storage or tracking service that went away and stayed away through bounded retries.
    The CLI prints it as one line and exits 3; every trial committed before is kept, and the
    study resumes by name once the service is back."""

    def __init__(self, option: str, uri: str, attempts: int, cause: str, hint: str = ""):
        self.option, self.uri = option, uri
        super().__init__(f"{option} {uri}: unreachable after {attempts} attempts ({cause})"
                         + (f"; {hint}" if hint else ""))
