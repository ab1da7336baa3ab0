"""How a job definition's validation errors read, for the API's 422 and for the CLI's checks before it sends
(one wording, so the CLI refuses exactly as the API would)."""

from __future__ import annotations

from pydantic import ValidationError

#: Discriminator tags pydantic puts in error locations (`schedule.cron.expression`); users write `schedule.expression`.
_TAGGED = {"schedule", "target"}
_TYPE_TAGS = {"once", "cron", "rate", "http", "sqs", "sns", "eventbridge", "lambda", "stepfunctions", "handler"}


def field_errors(exc: ValidationError, at: tuple[str, ...] = ()) -> list[tuple[str, str]]:
    """(field path as the user wrote it, human message) for each error; `at` is where the validated value sits in
    a job definition (`("schedule",)` for a schedule validated alone)."""
    errors = []
    for error in exc.errors():
        loc = [*at, *(str(p) for p in error["loc"])]
        # A tag right after the union it discriminates (`schedule.cron`); elsewhere it is a field (`flow_control.rate`).
        path = [
            p
            for i, p in enumerate(loc)
            if not (p in _TYPE_TAGS and i > 0 and loc[i - 1] in _TAGGED) and not p.startswith("function-")
        ]
        message = error["msg"].removeprefix("Value error, ")
        if error["type"] == "extra_forbidden":
            message = "unknown field (not part of the job definition)"
        errors.append((".".join(path) or "body", message))
    return errors


def summary(errors: list[tuple[str, str]]) -> str:
    """The problem's `detail`: the first error, and how many more there are."""
    field, message = errors[0]
    detail = f"{field}: {message}"
    if len(errors) > 1:
        detail += f" (and {len(errors) - 1} more problem{'s' if len(errors) > 2 else ''})"
    return detail
