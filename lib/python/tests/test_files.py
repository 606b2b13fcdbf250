"""robinhood_common.files on the shared probes (the Go twin: lib/safefile)."""
from __future__ import annotations

import errno
import os
import threading
from pathlib import Path

import pytest

from conftest import Probe
from robinhood_common.files import FileTooLarge, NotRegularFile, open_regular, read_bounded

BOUND = 1 << 20


def within(what: str, f):  # type: ignore[no-untyped-def]
    """f(), failing when it has not returned after a generous deadline (blocked on a FIFO)."""
    out: list = []
    t = threading.Thread(target=lambda: out.append(_call(f)), daemon=True)
    t.start()
    t.join(60)
    assert out, f"{what} did not return within 60 s (blocked?)"
    if isinstance(out[0], BaseException):
        raise out[0]
    return out[0]


def _call(f):  # type: ignore[no-untyped-def]
    try:
        return f()
    except BaseException as e:  # noqa: BLE001 - handed to the test thread
        return e


def test_every_probe(probes: list[Probe]) -> None:
    for p in probes:
        want: type[OSError] | None = {"not_regular": NotRegularFile, "too_large": FileTooLarge,
                                      "missing": FileNotFoundError}.get(p.refused)
        if p.kind == "content" and p.size > BOUND:
            want = FileTooLarge
        if want is None:
            assert len(within(p.name, lambda: read_bounded(p.path, BOUND))) == p.size, p.name
            continue
        with pytest.raises(want) as e:
            within(p.name, lambda: read_bounded(p.path, BOUND))
        assert str(p.path) in str(e.value) and "\n" not in str(e.value), (p.name, str(e.value))
        if p.refused == "not_regular":
            with pytest.raises(NotRegularFile):
                within(p.name, lambda: open_regular(p.path))


def test_messages_and_links(tmp_path: Path) -> None:
    ok = tmp_path / "ok"
    ok.write_bytes(b"x")
    (tmp_path / "link").symlink_to(ok)
    assert read_bounded(tmp_path / "link", 1) == b"x"
    with pytest.raises(FileTooLarge) as big:
        read_bounded(ok, 0)
    assert big.value.errno == errno.EFBIG and str(big.value) == f"{ok}: 1 bytes, more than the 0 read here"
    for path, kind in ((tmp_path, "a folder"), (Path(os.devnull), "a character device")):
        with pytest.raises(NotRegularFile) as e:
            open_regular(path)
        assert str(e.value) == f"{path}: {kind}, not a regular file"
        assert e.value.strerror == f"{kind}, not a regular file"  # what callers that format OSError print
