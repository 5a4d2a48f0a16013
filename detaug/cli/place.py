"""Putting a converted dataset in place: the destination is replaced atomically where the
system allows, and whatever a killed run left beside it is cleaned up by the next run.

Every folder a run makes beside the destination ``DST`` is hidden and carries the run's
process id: ``.DST.detaug-convert-<pid>-<random>`` (the dataset being written),
``.DST.detaug-images-<pid>-<random>`` (a TFRecord source's images) and
``.DST.detaug-convert-old-<pid>-<random>/previous`` (the previous content, set aside by the
fallback below). A run first looks for such folders of runs that are no longer alive (or of
versions that did not record the id) and removes them, except that set-aside content whose
destination is missing is moved back: see :func:`recover`.

Replacing a non-empty destination (``--overwrite``):

- Linux: ``renameat2(tmp, DST, RENAME_EXCHANGE)`` swaps the two folders in one step, so DST
  holds the old or the new dataset at every instant; the old content, now at the temporary
  name, is then removed (a kill before that leaves it for the next run to remove).
- Elsewhere, or on a file system without the exchange (``EINVAL``): DST is renamed aside,
  then the new folder to DST. A kill between the two renames leaves no DST: the next run
  moves the set-aside content back, and says so.
"""
from __future__ import annotations

import ctypes
import errno
import os
import re
import shutil
import sys
import tempfile

_AT_FDCWD = -100
_RENAME_EXCHANGE = 2
_SYS_RENAMEAT2 = {"x86_64": 316, "aarch64": 276, "ppc64le": 357, "s390x": 347}
_KINDS = ("convert-old", "convert", "images")


def staging_folder(dst: str, kind: str = "convert", parent: str | None = None) -> str:
    """A new hidden folder for ``kind`` beside ``dst`` (or in ``parent``), named with this
    process's id so that a later run can tell a live run's folder from a dead one's."""
    assert kind in _KINDS
    return tempfile.mkdtemp(prefix=f".{os.path.basename(dst)}.detaug-{kind}-{os.getpid()}-",
                            dir=os.path.dirname(dst) if parent is None else parent)


def _leftovers(dst):
    """``(path, kind, pid or None)`` of every folder a run left beside ``dst``."""
    parent, name = os.path.split(dst)
    pattern = re.compile(r"\." + re.escape(name) + r"\.detaug-(convert-old|convert|images)-"
                         r"(?:([0-9]+)-)?[a-z0-9_]{8}")
    try:
        entries = sorted(os.listdir(parent))
    except OSError:
        return []
    out = []
    for entry in entries:
        m = pattern.fullmatch(entry)
        path = os.path.join(parent, entry)
        if m and os.path.isdir(path) and not os.path.islink(path):
            out.append((path, m.group(1), int(m.group(2)) if m.group(2) else None))
    return out


def _alive(pid) -> bool:
    if pid is None:  # an earlier version's folder: it recorded no id; its run is over
        return False
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # another user's process: alive
        return True
    return True


def recover(dst: str, dry_run: bool = False) -> list:
    """Clean up after runs into ``dst`` that were killed; return one line per action.

    Set-aside previous content (``.DST.detaug-convert-old-*/previous``) is moved back to
    ``dst`` where ``dst`` is missing (the run was killed between its two renames), else
    removed (the new dataset was in place). Partial folders of dead runs are removed. Folders
    of live runs are left alone. ``dry_run``: say what would be done, do nothing.
    """
    lines = []
    verb = "would remove" if dry_run else "removed"
    for path, kind, pid in _leftovers(dst):
        if _alive(pid):
            continue
        previous = os.path.join(path, "previous")
        if kind == "convert-old" and os.path.isdir(previous) and not os.path.lexists(dst):
            lines.append(f"{'would restore' if dry_run else 'restored'} {dst} from {previous}: "
                         "a run replacing it was killed between its two renames")
            if not dry_run:
                os.rename(previous, dst)
        else:
            what = {"convert-old": "the previous content set aside by a run killed after "
                                   "placing the new dataset",
                    "convert": "a partial dataset of a killed run",
                    "images": "images unpacked by a killed run"}[kind]
            lines.append(f"{verb} {path}: {what}")
        if not dry_run:
            shutil.rmtree(path, ignore_errors=True)
    return lines


def _renameat2():
    """libc's ``renameat2`` (glibc 2.28+), else the raw system call; None off Linux."""
    if not sys.platform.startswith("linux"):
        return None
    libc = ctypes.CDLL(None, use_errno=True)
    fn = getattr(libc, "renameat2", None)
    if fn is not None:
        fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p,
                       ctypes.c_uint]
        return fn
    number = _SYS_RENAMEAT2.get(os.uname().machine)
    if number is None:
        return None
    return lambda *args: libc.syscall(ctypes.c_long(number), *(
        ctypes.c_int(a) if isinstance(a, int) else ctypes.c_char_p(a) for a in args))


def exchange(a: str, b: str) -> bool:
    """Swap the folders ``a`` and ``b`` in one step (``renameat2(RENAME_EXCHANGE)``). Returns
    False where the system or the file system has no such call; raises OSError for any other
    failure."""
    fn = _renameat2()
    if fn is None:
        return False
    if fn(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.ENOSYS, errno.EINVAL, errno.ENOTSUP, errno.EOPNOTSUPP):
        return False
    raise OSError(err, os.strerror(err), a, None, b)


def place(tmp: str, dst: str) -> None:
    """Move the complete folder ``tmp`` to ``dst``, replacing what is there (module docstring:
    atomically on Linux, else recoverably). ``tmp`` gets ``dst``'s permissions, or the
    umask's for a new folder."""
    if os.path.isdir(dst):
        mode = os.stat(dst).st_mode & 0o7777
    else:
        umask = os.umask(0)
        os.umask(umask)
        mode = 0o777 & ~umask
    os.chmod(tmp, mode)  # mkdtemp made it 0700
    if not (os.path.isdir(dst) and os.listdir(dst)):
        os.replace(tmp, dst)  # onto nothing, or onto an empty folder: one rename
        return
    if exchange(tmp, dst):
        # the previous content; what cannot be removed now (a kill, a permission) is left
        # under the run's name for the next run to remove: the new dataset is in place
        shutil.rmtree(tmp, ignore_errors=True)
        return
    old = staging_folder(dst, "convert-old")
    aside = os.path.join(old, "previous")
    os.rename(dst, aside)
    try:
        os.rename(tmp, dst)
    except BaseException:
        os.rename(aside, dst)
        os.rmdir(old)
        raise
    shutil.rmtree(old, ignore_errors=True)  # (as above: the next run removes what is left)
