"""What the CLI raises besides the SDK's errors (punctual_sdk.errors): a definition refused here, before sending,
with the status and messages the API would give (checked with the core's own model)."""

from __future__ import annotations

from pydantic import ValidationError

from punctual_sdk.errors import ApiError, AuthError, FieldError, TransportError
from scheduler.core.model.validation import field_errors, summary


class InvalidDefinition(ApiError):
    """A job definition refused here, before sending, with the same status and messages the API would give."""


def definition_problem(exc: ValidationError, at: tuple[str, ...] = ()) -> InvalidDefinition:
    """The 422 the API answers for this validation error: fields as the API names them, same messages (`at`: where
    the validated value sits in a job definition)."""
    errors = field_errors(exc, at)
    return InvalidDefinition(
        422,
        "Unprocessable Content",
        summary(errors),
        errors=tuple(FieldError(field, message) for field, message in errors),
    )


__all__ = ["ApiError", "AuthError", "FieldError", "InvalidDefinition", "TransportError", "definition_problem"]
