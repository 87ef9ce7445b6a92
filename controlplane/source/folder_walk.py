"""Which files of a manifests folder are read, and which entries are skipped and why.

How links are followed (docs/operations.md, "Malformed and hostile manifests"):

- A symlink to a file is followed when the file it resolves to lies inside the folder:
  a ConfigMap volume (`x.yaml -> ..data/x.yaml`, `..data -> ..2026_.../`) works, and a
  link cannot make the control plane read `/etc` or another mounted secret.
- A symlink to a directory is never followed: no loop (`sub/up -> ..`) and no escape
  (`-> /usr`, which cost 15,513 inotify watches), and each object is found once.
- Entries whose name starts with `..` are Kubernetes' atomic-writer internals (`..data`,
  `..2026_01_01_...`, `..data_tmp`): not walked, their files are reached through the
  links above.
- Everything else that cannot be read is skipped and reported, once, with the reason: a
  dangling or looping symlink, a link leading outside, a directory symlink, a FIFO,
  socket or device with a manifest suffix, a subdirectory that cannot be listed.

The walk only stats (never opens a file), so it cannot block on a FIFO, and only what it
may read: a file named otherwise (an editor's or a writer's temporary file) is passed over
by name. An entry gone between the listing and its stat (or a subdirectory gone before
it was listed) is no entry: not reported. A rescan of a
folder of 8,000 files every 10 s is the folder source's safety net: it reuses the Path
objects of the walk before (`Walk.paths`; making and hashing 8,000 new Paths was most of its
cost, 68 ms a pass), and decides by name before making anything, so what is left is one
`lstat` per file.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

MANIFEST_SUFFIXES = (".yaml", ".yml", ".json")

Identity = tuple[int, int, int]
"""(inode, size, mtime_ns) of what a path resolves to: the same identity is not read again
(a ConfigMap update swaps `..data`, so a link's target changes inode)."""


@dataclass(slots=True)
class Walk:
    files: dict[Path, Identity] = field(default_factory=dict)  # as under the given folder
    directories: set[Path] = field(default_factory=set)  # real directories walked
    skipped: dict[Path, str] = field(default_factory=dict)  # entry -> why
    paths: dict[str, Path] = field(default_factory=dict)  # each entry's Path, by its string


def manifest_name(name: str) -> bool:
    """Whether a file of this name is read (`Path.suffix` in `MANIFEST_SUFFIXES`)."""
    dot = name.rfind(".")
    return dot > 0 and name[dot:] in MANIFEST_SUFFIXES


def internal(name: str) -> bool:
    """Kubernetes' atomic-writer entries (`..data` and the timestamped directories)."""
    return name.startswith("..")


def walk(directory: Path, reuse: Mapping[str, Path] | None = None) -> Walk:
    """The manifest files under `directory`, following the rules above; `reuse`: the
    `paths` of a walk before, whose Path objects stand again for the same entries."""
    reuse = reuse or {}
    found = Walk(directories={directory})
    root = Path(os.path.realpath(directory))
    pending = [directory]
    while pending:
        current = pending.pop()
        try:
            entries = list(os.scandir(current))
        except OSError as err:
            if current == directory:
                raise
            found.directories.discard(current)
            if not isinstance(err, FileNotFoundError):  # gone since its parent's listing
                found.skipped[current] = f"cannot list the directory: {err.strerror or err}"
            continue
        for entry in entries:
            name = entry.name
            if internal(name):
                continue
            key = entry.path
            path = reuse.get(key) or current / name
            found.paths[key] = path
            try:
                _visit(entry, path, root, found, pending)
            except FileNotFoundError:
                # Gone since the listing (a temporary file renamed into place, a file
                # removed): not an entry to report; its removal notifies on its own.
                found.paths.pop(key, None)
            except OSError as err:
                found.skipped[path] = f"cannot stat: {err.strerror or err}"
    return found


def _visit(
    entry: os.DirEntry[str], path: Path, root: Path, found: Walk, pending: list[Path]
) -> None:
    if entry.is_symlink():
        _link(path, root, found)
        return
    if entry.is_dir(follow_symlinks=False):  # the listing's file type: no stat
        found.directories.add(path)
        pending.append(path)
        return
    if not manifest_name(entry.name):  # never read, so never stat'ed either
        return
    info = entry.stat(follow_symlinks=False)
    if stat.S_ISREG(info.st_mode):
        found.files[path] = (info.st_ino, info.st_size, info.st_mtime_ns)
    else:
        found.skipped[path] = f"not a regular file ({kind(info.st_mode)})"


def _link(path: Path, root: Path, found: Walk) -> None:
    try:
        info = path.stat()
    except OSError as err:
        if err.errno == errno.ELOOP:
            found.skipped[path] = "symlink loop"
        elif err.errno == errno.ENOENT:
            if not os.path.lexists(path):  # the link itself is gone since the listing
                raise
            found.skipped[path] = "dangling symlink"
        else:
            found.skipped[path] = f"cannot follow the symlink: {err.strerror or err}"
        return
    if stat.S_ISDIR(info.st_mode):
        found.skipped[path] = "symlink to a directory: not followed"
        return
    if not manifest_name(path.name):
        return
    if not Path(os.path.realpath(path)).is_relative_to(root):
        found.skipped[path] = "symlink leading outside the folder: not followed"
    elif not stat.S_ISREG(info.st_mode):
        found.skipped[path] = f"symlink to {kind(info.st_mode)}"
    else:
        found.files[path] = (info.st_ino, info.st_size, info.st_mtime_ns)


def kind(mode: int) -> str:
    """What a non-regular file is, for messages."""
    kinds = (
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISDIR, "a directory"),
    )
    return next((name for check, name in kinds if check(mode)), "not a regular file")
