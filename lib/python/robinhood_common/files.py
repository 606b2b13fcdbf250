"""Opening and reading the files an operator names (secrets, certificates, configurations,
schedules), so that the wrong kind of file fails at once with a clear error instead of
hanging or eating memory (docs/security.md, "Files"): only a regular file is opened (a
named pipe is opened without waiting for a writer, then refused, as are devices such as
/dev/zero, sockets and folders), and :func:`read_bounded` reads at most its bound,
refusing a larger file by its size before reading it (a 2 GB sparse file costs nothing).

The Go twin is ``lib/safefile``; both run the probes of ``tests/vectors/probes.json``.
"""
from __future__ import annotations

import errno
import os
import stat
from pathlib import Path
from typing import BinaryIO


class FileRefused(OSError):
    """A path that is not a regular file, or a file over the reader's bound. An OSError,
    so that callers that already report an unreadable file report this one the same way;
    ``strerror`` says what is wrong, ``filename`` is the path, and ``str()`` is one line
    naming both."""

    def __str__(self) -> str:
        return f"{self.filename}: {self.strerror}"


class NotRegularFile(FileRefused):
    """A named pipe, a device, a socket or a folder where a file was expected."""


class FileTooLarge(FileRefused):
    """A file larger than its reader's bound."""


def _kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a folder"
    if stat.S_ISFIFO(mode):
        return "a named pipe (FIFO)"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode):
        return "a character device"
    if stat.S_ISBLK(mode):
        return "a block device"
    return "a special file"


def open_regular(path: str | Path) -> BinaryIO:
    """``path`` opened for reading in binary mode when it is a regular file (symbolic links
    followed); NotRegularFile, without blocking, when it is anything else; OSError when it
    cannot be opened."""
    # O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer.
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise NotRegularFile(errno.EINVAL, f"{_kind(mode)}, not a regular file", str(path))
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_bounded(path: str | Path, limit: int) -> bytes:
    """The bytes of the regular file at ``path`` (open_regular's rule), at most ``limit``:
    FileTooLarge for a larger file, refused by its size before it is read and never read
    past ``limit + 1`` bytes when it grows."""
    with open_regular(path) as f:
        size = os.fstat(f.fileno()).st_size
        if size > limit:
            raise FileTooLarge(errno.EFBIG, f"{size} bytes, more than the {limit} read here", str(path))
        data = f.read(limit + 1)
    if len(data) > limit:
        raise FileTooLarge(errno.EFBIG, f"more than {limit} bytes, the most read here", str(path))
    return data


def read_text_bounded(path: str | Path, limit: int) -> str:
    """read_bounded as UTF-8 text (undecodable bytes replaced)."""
    return read_bounded(path, limit).decode("utf-8", errors="replace")

