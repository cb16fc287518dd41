"""Reading and writing profile files (YAML); the only engine module that touches them.

Three places hold profile files: the built-ins shipped inside the package
(``engine/profile_data``), the directories named by ``PRESCALER_PROFILE_DIR``
(a mounted ConfigMap, several joined by ``os.pathsep``), and any path a user
passes where a profile name is accepted. Each file is parsed and validated
once per version (path, size and modification time), so callers that look a
profile up on every tick pay a ``stat``, not a parse.

``python -m engine.profile_files --write-builtins`` regenerates the shipped
files from ``engine.profile_catalogue.code_catalogue()``.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

import yaml

from engine.profile_schema import ProfileFileError, profile_from_document, profile_to_document
from engine.profile_types import Profile

#: Directories of profile files that add named profiles (``os.pathsep``-separated).
PROFILE_DIR_ENV = "PRESCALER_PROFILE_DIR"
BUILTIN_DIR = Path(__file__).parent / "profile_data"
PROFILE_SUFFIXES: tuple[str, ...] = (".yaml", ".yml")

_Loader: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_Dumper: Any = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
_cache: dict[Path, tuple[tuple[int, int], Profile]] = {}


def parse_profile_text(text: str, source: str) -> Profile:
    """The profile a YAML text describes; ``source`` names it in errors."""
    try:
        doc = yaml.load(text, Loader=_Loader)
    except yaml.YAMLError as exc:
        raise ProfileFileError(source, "(yaml)", f"not valid YAML: {exc}") from None
    return profile_from_document(doc, source)


def read_profile_file(path: str | Path) -> Profile:
    """The validated profile in ``path`` (cached until the file changes)."""
    target = Path(path).expanduser()
    try:
        stat = target.stat()
        resolved = target.resolve()
    except OSError as exc:
        raise ProfileFileError(str(path), "(file)", f"cannot read: {exc.strerror}") from None
    version = (stat.st_size, stat.st_mtime_ns)
    hit = _cache.get(resolved)
    if hit is not None and hit[0] == version:
        return hit[1]
    try:
        text = target.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ProfileFileError(str(path), "(file)", f"cannot read: {exc}") from None
    profile = parse_profile_text(text, str(path))
    _cache[resolved] = (version, profile)
    return profile


def profile_yaml(profile: Profile, header: str = "") -> str:
    """The YAML text of ``profile`` (floats written so they read back bit for bit)."""
    body = yaml.dump(
        profile_to_document(profile), Dumper=_Dumper, sort_keys=False, allow_unicode=True
    )
    comment = "".join(f"# {line}\n".replace("# \n", "#\n") for line in header.splitlines())
    return comment + body


def write_profile_file(profile: Profile, path: str | Path, header: str = "") -> Path:
    """Write ``profile`` to ``path`` (``header`` becomes leading comment lines)."""
    target = Path(path)
    target.write_text(profile_yaml(profile, header), encoding="utf-8")
    return target


def profile_files_in(directory: Path) -> list[Path]:
    """The profile files directly in ``directory``, by name (dot-files skipped:
    a mounted ConfigMap keeps its real files behind ``..data`` links)."""
    return sorted(
        p
        for p in directory.iterdir()
        if p.suffix in PROFILE_SUFFIXES and not p.name.startswith(".") and p.is_file()
    )


def profiles_in_directory(directory: str | Path) -> dict[str, Profile]:
    """Every profile in ``directory`` by its ``name`` (two files with one name refused)."""
    root = Path(directory)
    if not root.is_dir():
        raise ProfileFileError(str(root), "(directory)", "not a directory")
    out: dict[str, Profile] = {}
    origin: dict[str, Path] = {}
    for path in profile_files_in(root):
        profile = read_profile_file(path)
        if profile.name in out:
            raise ProfileFileError(
                str(path), "name", f"{profile.name!r} is also the name in {origin[profile.name]}"
            )
        out[profile.name] = profile
        origin[profile.name] = path
    return out


def builtin_profiles() -> dict[str, Profile]:
    """The catalogue shipped with the package."""
    return profiles_in_directory(BUILTIN_DIR)


def profile_dirs_from_env(environ: dict[str, str] | None = None) -> list[Path]:
    """The directories ``PRESCALER_PROFILE_DIR`` names (none when unset or empty)."""
    raw = (os.environ if environ is None else environ).get(PROFILE_DIR_ENV, "")
    return [Path(part) for part in raw.split(os.pathsep) if part.strip()]


def builtin_file_name(name: str) -> str:
    """The shipped file of a built-in profile (its name, which holds no path separator)."""
    return f"{name}.yaml"


def write_builtins(directory: Path = BUILTIN_DIR) -> list[Path]:
    """Regenerate the shipped files from the code catalogue (and drop stale ones)."""
    from engine.profile_catalogue import code_catalogue

    catalogue = code_catalogue()
    directory.mkdir(parents=True, exist_ok=True)
    wanted = {builtin_file_name(name) for name in catalogue}
    for old in profile_files_in(directory):
        if old.name not in wanted:
            old.unlink()
    header = (
        "Built-in profile, generated by `python -m engine.profile_files --write-builtins`\n"
        "from engine/profile_catalogue.py; edit that and regenerate."
    )
    return [
        write_profile_file(profile, directory / builtin_file_name(name), header)
        for name, profile in sorted(catalogue.items())
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m engine.profile_files", description="maintain the shipped profile files"
    )
    parser.add_argument(
        "--write-builtins",
        action="store_true",
        help="regenerate engine/profile_data/*.yaml from engine/profile_catalogue.py",
    )
    args = parser.parse_args(argv)
    if not args.write_builtins:
        parser.print_usage(sys.stderr)
        return 2
    for path in write_builtins():
        sys.stdout.write(f"{path}\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
