"""Checkpoints that a crash cannot half-write.

A checkpoint is written into a temporary folder, renamed into place, and only then named in
`checkpoints/latest` (itself replaced atomically). A crash at any moment leaves the previous
checkpoint named in `latest` and whole.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path

KEEP = 2


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_checkpoint(root: Path, name: str, write: Callable[[Path], None]) -> Path:
    """Run `write(folder)` into a fresh folder, then publish it as `root/name`."""
    root.mkdir(parents=True, exist_ok=True)
    tmp = root / f".tmp-{name}"
    final = root / name
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    write(tmp)
    for file in tmp.iterdir():
        with open(file, "rb") as f:
            os.fsync(f.fileno())
    shutil.rmtree(final, ignore_errors=True)
    tmp.rename(final)
    pointer = root / "latest.tmp"
    pointer.write_text(name + "\n")
    with open(pointer, "rb") as f:
        os.fsync(f.fileno())
    pointer.replace(root / "latest")
    _fsync_dir(root)
    for old in sorted(p for p in root.glob("ckpt-*") if p.is_dir())[:-KEEP]:
        shutil.rmtree(old, ignore_errors=True)
    return final


def latest_checkpoint(root: Path) -> Path | None:
    pointer = root / "latest"
    if not pointer.is_file():
        return None
    folder = root / pointer.read_text().strip()
    return folder if folder.is_dir() else None


def write_json(path: Path, doc: dict) -> None:
    """Replace a JSON file atomically."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n")
    tmp.replace(path)


def write_bytes(path: Path, data: bytes) -> None:
    """Replace a file atomically."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(data)
    tmp.replace(path)
