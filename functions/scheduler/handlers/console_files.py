"""The web console's static files (docs/console.md): shipped inside the `scheduler` package, served at `/console/`
without credentials by the local API server and, on AWS, by the api function behind an unauthorised
`GET /console/{proxy+}` resource. The files hold no data; every API call the console makes is signed by the user."""

from __future__ import annotations

from pathlib import Path

CONSOLE_DIR = Path(__file__).resolve().parent.parent / "console"
CONSOLE_PREFIX = "/console"
CONSOLE_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".mjs": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".png": "image/png",
    ".svg": "image/svg+xml",
}

#: The console runs only its own scripts and styles, and talks only to this origin.
CONSOLE_CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
    "frame-ancestors 'none'; base-uri 'self'; form-action 'self'"
)


def console_file(path: str, root: Path = CONSOLE_DIR) -> tuple[bytes, str] | None:
    """The console file that `path` (under /console/) names, with its content type; None for anything else: a
    path outside the console's folder (`..`, a symlink out), a folder, or a file of a type it does not serve."""
    relative = path[len(CONSOLE_PREFIX) :].lstrip("/") or "index.html"
    try:
        base = root.resolve()
        file = (base / relative).resolve()
        if not file.is_relative_to(base) or not file.is_file() or file.suffix not in CONSOLE_TYPES:
            return None
        return file.read_bytes(), CONSOLE_TYPES[file.suffix]
    except (OSError, ValueError):  # a name too long for a file, or one the file system cannot hold
        return None


def console_headers(content_type: str) -> dict[str, str]:
    """The headers a console file is sent with."""
    return {
        "Content-Type": content_type,
        "Cache-Control": "no-cache",
        "X-Content-Type-Options": "nosniff",
        "Content-Security-Policy": CONSOLE_CSP,
    }
