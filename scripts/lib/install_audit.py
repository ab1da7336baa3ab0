"""What a user's `pip install` left in an environment, judged from the installed metadata (scripts/sdk-check runs it
with the environment's own python):

    python install_audit.py DIST_DIR REQUIREMENT...      e.g. dist "punctual-sdk[testing]" pytest

- ours: every distribution built into DIST_DIR (its wheels). Each one installed must be that wheel, file for file
  (its RECORD's hashes), not a namesake from a package index; it may bring only its own top-level packages, and
  it names its licence (what `pip show` prints) and installs the licence's text;
- declared: the REQUIREMENTs (what was asked for, with their extras) and everything they require, transitively, as
  the installed distributions' metadata says (markers evaluated here). Every installed distribution must be ours or
  declared (pip itself excepted), and every declared one installed;
- ranges: what ours require of any other project is a range, never an exact pin (an exact pin would move the app's
  own version of it).

Prints what is wrong, one line each, and exits 1; prints a one-line summary and exits 0 otherwise.
"""

from __future__ import annotations

import base64
import csv
import hashlib
import io
import sys
import zipfile
from importlib import metadata
from pathlib import Path

try:
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name
except ImportError:  # a user's venv need not have packaging; pip carries it
    from pip._vendor.packaging.requirements import Requirement  # type: ignore[no-redef]
    from pip._vendor.packaging.utils import canonicalize_name  # type: ignore[no-redef]

#: The top-level packages each of our distributions may install; nothing else of ours lands in an app's environment.
TOP_LEVEL = {
    "punctual-core": {"scheduler"},
    "punctual-sdk": {"punctual_sdk"},
    "punctual-cli": {"punctual_cli"},
}
#: In every venv before anything is installed.
SEEDED = {"pip", "setuptools", "wheel"}


def wheel_name(path: Path) -> tuple[str, str]:
    name, version = path.name.split("-")[:2]
    return str(canonicalize_name(name)), version


def record_of(lines: str) -> dict[str, str]:
    """path -> hash of a RECORD, leaving out the dist-info folder (pip rewrites it on install)."""
    return {row[0]: row[1] for row in csv.reader(io.StringIO(lines)) if row and row[1] and ".dist-info/" not in row[0]}


def top_level(distribution: metadata.Distribution) -> set[str]:
    names = set()
    for file in distribution.files or []:
        first = file.parts[0]
        if first.endswith((".dist-info", ".data")) or first in ("..", "__pycache__") or file.suffix == ".pth":
            continue
        names.add(first[: -len(".py")] if first.endswith(".py") else first)
    return names


def file_hash(path: Path) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(path.read_bytes()).digest()).rstrip(b"=").decode()


def audit(dist_dir: Path, requested: list[str]) -> list[str]:
    problems: list[str] = []
    wheels = {wheel_name(w): w for w in sorted(dist_dir.glob("*.whl"))}
    ours = {name for name, _ in wheels}
    installed = {str(canonicalize_name(d.metadata["Name"])): d for d in metadata.distributions()}

    # ours: the very wheels built, nothing but their own packages
    for (name, version), wheel in wheels.items():
        found = installed.get(name)
        if found is None:
            continue
        if found.version != version:
            problems.append(f"{name} {found.version} is installed, not the {version} built into {dist_dir}")
            continue
        with zipfile.ZipFile(wheel) as archive:
            record = next(n for n in archive.namelist() if n.endswith(".dist-info/RECORD"))
            built = record_of(archive.read(record).decode())
        root = Path(str(found.locate_file("")))
        strays = [p for p, h in built.items() if not (root / p).is_file() or file_hash(root / p) != h]
        if strays:
            problems.append(
                f"{name} {version} is installed but is not {wheel.name} ({len(strays)} of its files differ, e.g. "
                f"{strays[0]}): a namesake from a package index?"
            )
        extra = top_level(found) - TOP_LEVEL.get(name, set())
        if extra:
            problems.append(f"{name} installs top-level packages that are not its own: {', '.join(sorted(extra))}")
        licence = found.metadata.get("License-Expression") or found.metadata.get("License")
        texts = [f for f in found.files or [] if f.parent.name == "licenses" and f.locate().is_file()]
        if not licence or not texts:
            problems.append(
                f"{name} installs without its licence (`pip show` names {licence or 'none'}, texts: "
                f"{len(texts)}): license and license-files in its pyproject.toml"
            )

    # declared: the closure of what was asked for, through the installed metadata
    declared: set[str] = set()
    todo: list[tuple[Requirement, str]] = [(Requirement(r), "the install command") for r in requested]
    seen: set[tuple[str, frozenset[str]]] = set()
    while todo:
        requirement, by = todo.pop()
        name = str(canonicalize_name(requirement.name))
        key = (name, frozenset(requirement.extras))
        if key in seen:
            continue
        seen.add(key)
        found = installed.get(name)
        if found is None:
            problems.append(f"{requirement} (required by {by}) is not installed")
            continue
        declared.add(name)
        if not requirement.specifier.contains(found.version, prereleases=True):
            problems.append(f"{name} {found.version} is installed, but {by} requires {requirement}")
        for text in found.requires or []:
            needed = Requirement(text)
            applies = needed.marker is None or any(
                needed.marker.evaluate({"extra": extra}) for extra in (requirement.extras or {""})
            )
            if not applies:
                continue
            if name in ours and str(canonicalize_name(needed.name)) not in ours:
                pinned = [s for s in needed.specifier if s.operator in ("==", "===")]
                if pinned:
                    problems.append(f"{name} pins {needed.name}{pinned[0]} exactly: give an app a range")
            todo.append((needed, name))
    for name in sorted(set(installed) - declared - SEEDED):
        what = "ours, but not asked for" if name in ours else "neither ours nor required by anything installed"
        problems.append(f"{name} {installed[name].version} is installed: {what}")
    return problems


def main(argv: list[str]) -> int:
    if len(argv) < 2 or not Path(argv[0]).is_dir():
        print(__doc__, file=sys.stderr)
        return 2
    dist_dir, requested = Path(argv[0]), argv[1:]
    problems = audit(dist_dir, requested)
    for problem in problems:
        print(f"install audit: {problem}", file=sys.stderr)
    if problems:
        return 1
    installed = {str(canonicalize_name(d.metadata["Name"])) for d in metadata.distributions()}
    ours = sorted(installed & {wheel_name(w)[0] for w in dist_dir.glob("*.whl")})
    print(
        f"install audit: {len(installed)} distributions: {', '.join(ours)} (the wheels built) and "
        f"{len(installed - set(ours) - SEEDED)} required by {', '.join(requested)}, nothing else"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
