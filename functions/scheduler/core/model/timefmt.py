"""Instants: always timezone-aware UTC datetimes inside the core, RFC 3339 with `Z` at the edges."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta


def utc(dt: datetime) -> datetime:
    """Return `dt` as an aware UTC datetime; naive datetimes are refused (they are ambiguous)."""
    if dt.tzinfo is UTC:
        return dt  # already one (the common case: the core's own instants)
    if dt.tzinfo is None or dt.utcoffset() is None:
        raise ValueError("a time needs an explicit UTC offset")
    return dt.astimezone(UTC)


def rfc3339(dt: datetime) -> str:
    """Format as RFC 3339 in UTC with a `Z`; milliseconds only when the instant has them."""
    dt = utc(dt)
    # Only the milliseconds count: an instant with a few microseconds formats as its millisecond-truncated self
    # (what storage and the message body carry), so the key read back from a message is the key it was sent with.
    text = f"{dt.year:04d}-{dt.month:02d}-{dt.day:02d}T{dt.hour:02d}:{dt.minute:02d}:{dt.second:02d}"
    if ms := dt.microsecond // 1000:
        return f"{text}.{ms:03d}Z"
    return f"{text}Z"


def parse_rfc3339(text: str) -> datetime:
    """Parse an RFC 3339 instant that carries an offset (`Z` or `+hh:mm`)."""
    return utc(datetime.fromisoformat(text.replace("Z", "+00:00")))


def to_ms(dt: datetime) -> int:
    """Milliseconds since the epoch (the numeric form stored for comparisons)."""
    return round(utc(dt).timestamp() * 1000)


def from_ms(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, tz=UTC)


def truncate_ms(dt: datetime) -> datetime:
    """Drop sub-millisecond precision, so every instant survives a round trip through storage."""
    dt = utc(dt)
    return dt.replace(microsecond=(dt.microsecond // 1000) * 1000)


def minute_of(dt: datetime) -> datetime:
    """The start of the minute that contains `dt` (the time bucket's minute)."""
    return utc(dt).replace(second=0, microsecond=0)


def minute_key(dt: datetime) -> str:
    """The bucket minute as a sortable string, e.g. `2026-11-29T09:00`."""
    return minute_of(dt).strftime("%Y-%m-%dT%H:%M")


ONE_MINUTE = timedelta(minutes=1)
