"""`manifest.json`: the sha256 and size of every file of a build, its settings, its sources, and one
build digest over all of that, so two builds (or a build and a checkpoint's expectations) can be
compared by one string, and `--verify` can re-check a build byte for byte.

The digest covers only machine-independent facts: file hashes and sizes by relative path, the build
settings, and each source's kind and content hash. Folder paths are recorded beside it, not in it.
"""
from __future__ import annotations

import hashlib
import json
import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

MANIFEST = "manifest.json"
FORMAT = "arc-aug/1"


def build_digest(files: dict, settings: dict, sources: list[dict]) -> str:
    body = {
        "format": FORMAT,
        "files": {k: files[k] for k in sorted(files)},
        "settings": settings,
        "sources": [{"kind": s["kind"], "sha256": s["sha256"]} for s in sources],
    }
    return hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def manifest_dict(files: dict, settings: dict, sources: list[dict]) -> dict:
    return {
        "format": FORMAT,
        "digest": build_digest(files, settings, sources),
        "settings": settings,
        "sources": sources,
        "files": {k: files[k] for k in sorted(files)},
    }


def hash_file(path: Path, block: int = 1 << 24) -> dict:
    sha = hashlib.sha256()
    size = 0
    with open(path, "rb") as f:
        while chunk := f.read(block):
            sha.update(chunk)
            size += len(chunk)
    return {"sha256": sha.hexdigest(), "size": size}


def read_manifest(build_dir) -> dict:
    path = Path(build_dir) / MANIFEST
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no manifest (is {build_dir} a build made by build_arc.py?)")
    try:
        # bytes: a manifest that is not UTF-8 (damaged, or another tool's) is refused with its path, not
        # by a bare UnicodeDecodeError that names no file
        manifest = json.loads(path.read_bytes())
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ValueError(f"{path}: invalid JSON: {e}") from None
    if not isinstance(manifest, dict):
        raise ValueError(f"{path}: expected a JSON object, got {type(manifest).__name__}")
    for key in ("format", "digest", "settings", "sources", "files"):
        if key not in manifest:
            raise ValueError(f"{path}: missing field {key!r}")
    if manifest["format"] != FORMAT:
        # the digest is computed over this format's name: another's would be reported as a
        # damaged manifest, and its files read by rules that are not theirs
        raise ValueError(f"{path}: format {manifest['format']!r}; this code reads {FORMAT!r} builds (rebuild with "
                         f"this version's build_arc.py, or use the version that made it)")
    files, sources = manifest["files"], manifest["sources"]
    if not isinstance(files, dict):
        raise ValueError(f"{path}: field 'files' must be an object of path -> {{sha256, size}}")
    for rel, entry in files.items():
        if not (isinstance(entry, dict) and isinstance(entry.get("sha256"), str)
                and type(entry.get("size")) is int):
            raise ValueError(f"{path}: files[{rel!r}] must be {{'sha256': str, 'size': int}}, got {entry!r}")
    if not isinstance(sources, list) or not all(isinstance(s, dict) and "kind" in s and "sha256" in s
                                                for s in sources):
        raise ValueError(f"{path}: field 'sources' must be a list of objects with 'kind' and 'sha256'")
    return manifest


def _files_under(root: Path) -> set[str]:
    """Relative paths of the files under `root`, through symbolic links to folders too: a split moved
    to another disk and linked back is read by the reader as it is, so it must not be reported
    missing (Path.rglob does not enter linked folders). Each real folder is entered once, so a link to
    an ancestor cannot loop."""
    found, entered = set(), set()
    for folder, subfolders, names in os.walk(root, followlinks=True):
        real = os.path.realpath(folder)
        if real in entered:
            subfolders.clear()
            continue
        entered.add(real)
        rel = Path(folder).relative_to(root)
        found |= {(rel / name).as_posix() for name in names if os.path.isfile(os.path.join(folder, name))}
    return found


def _visible_files(root: Path) -> set[str]:
    """The files under a build folder, as manifest paths, but the manifest itself and hidden ones:
    those are the system's, never a build's (.DS_Store from a Mac's Finder, .nfs* on NFS), and
    browsing a build must not make an intact one fail."""
    present = {rel for rel in _files_under(root) if not any(part.startswith(".") for part in rel.split("/"))}
    return present - {MANIFEST}


def extra_files(build_dir, manifest: dict) -> list[str]:
    """Files in a build folder that its manifest does not list (someone's notes, a copied file),
    sorted: --verify reports them, and --overwrite will not delete them."""
    return sorted(_visible_files(Path(build_dir)) - set(manifest["files"]))


def verify(build_dir) -> list[str]:
    """Re-hash every file against the manifest. Returns the problems found (empty = the build is intact)."""
    root = Path(build_dir)
    manifest = read_manifest(root)
    expected = manifest["files"]
    present = _visible_files(root)
    problems = [f"missing: {rel}" for rel in sorted(set(expected) - present)]
    problems += [f"extra: {rel}" for rel in extra_files(root, manifest)]
    to_check = sorted(set(expected) & present, key=lambda rel: -expected[rel]["size"])
    with ThreadPoolExecutor(2) as pool:  # sha256 releases the GIL: use both cores on the big arrays
        actual = dict(zip(to_check, pool.map(lambda rel: hash_file(root / rel), to_check)))
    for rel in sorted(to_check):
        want, got = expected[rel], actual[rel]
        if want["size"] != got["size"]:
            problems.append(f"changed: {rel} (size {got['size']}, manifest says {want['size']})")
        elif want["sha256"] != got["sha256"]:
            problems.append(f"changed: {rel} (sha256 {got['sha256'][:16]}..., manifest says {want['sha256'][:16]}...)")
    if build_digest(expected, manifest["settings"], manifest["sources"]) != manifest["digest"]:
        problems.append(f"changed: {MANIFEST} (its digest does not match its contents)")
    return problems


def build_identity(build_dir) -> dict:
    """What a checkpoint records of the build it was trained on, to recognise it later:
    `identifiers_sha256`, the sha256 of identifiers.json (what each puzzle-embedding row means: a
    build with another seed or listing order has the same sizes but other names), and `digest`, the
    build digest of manifest.json (None for a build without one, e.g. the original HRM builder's)."""
    path = Path(build_dir) / "identifiers.json"
    try:
        identifiers = hash_file(path)["sha256"]
    except OSError as e:
        raise FileNotFoundError(f"{path}: cannot read it ({e.strerror or e})") from None
    try:
        digest = read_manifest(build_dir)["digest"]
    except FileNotFoundError:
        digest = None
    return {"identifiers_sha256": identifiers, "digest": digest}
