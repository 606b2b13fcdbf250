"""The token-file reader against the shared vectors (tests/vectors/auth), and the
credential's re-reading of a rotated token."""
from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from robinhood_common.auth import AuthError, Credential, Tokens, is_loopback, parse_tokens

VECTORS = Path(__file__).resolve().parents[3] / "tests" / "vectors" / "auth"


@pytest.mark.parametrize("path", sorted(VECTORS.glob("*.tokens")), ids=lambda p: p.name)
def test_vectors(path: Path) -> None:
    text = path.read_text()
    expect = text.splitlines()[0].removeprefix("# expect: ")
    if expect.startswith("ok "):
        assert ",".join(e.name for e in parse_tokens(str(path), text)) == expect[3:]
        return
    with pytest.raises(AuthError) as ei:
        parse_tokens(str(path), text)
    assert expect in str(ei.value)


def test_vectors_exist() -> None:
    assert len(list(VECTORS.glob("*.tokens"))) >= 5


def test_verify_and_header() -> None:
    t = Tokens(parse_tokens("x", "app0 aaaaaaaaaaaaaaaaaaaa\nop bbbbbbbbbbbbbbbbbbbb\n"))
    assert t.verify("aaaaaaaaaaaaaaaaaaaa") == "app0"
    assert t.check_header("Bearer bbbbbbbbbbbbbbbbbbbb") == "op"
    assert t.check_header("bearer bbbbbbbbbbbbbbbbbbbb") == "op"
    for bad in (None, "", "Bearer ", "Basic bbbbbbbbbbbbbbbbbbbb", "Bearer cccccccccccccccccccc"):
        assert t.check_header(bad) is None


def test_loopback() -> None:
    assert is_loopback("127.0.0.1") and is_loopback("[::1]") and is_loopback("localhost")
    assert not any(is_loopback(h) for h in ("", "0.0.0.0", "::", "10.1.2.3", "rbc"))


def test_credential_rotation(tmp_path: Path) -> None:
    f = tmp_path / "app0.token"
    f.write_text("app0 oldoldoldoldoldoldold\n")
    f.chmod(0o600)
    c = Credential(str(f))
    assert c.token() == "oldoldoldoldoldoldold"
    f.write_text("app0 newnewnewnewnewnewnewnew\n")
    os.utime(f, (time.time() + 5, time.time() + 5))
    c._checked -= 2  # as if two seconds had passed
    assert c.token() == "newnewnewnewnewnewnewnew"
    f.write_text("app0 short\n")  # a broken file keeps the last good token
    os.utime(f, (time.time() + 10, time.time() + 10))
    c._checked -= 2
    assert c.token() == "newnewnewnewnewnewnewnew"
    assert c.metadata() == (("authorization", "Bearer newnewnewnewnewnewnewnew"),)


def test_a_secret_others_can_read_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                            caplog: pytest.LogCaptureFixture) -> None:
    """A token file (or a TLS key) readable by group or others is refused, as ssh refuses
    such a private key; ROBINHOOD_ALLOW_SHARED_SECRETS=1 accepts it with a warning."""
    from robinhood_common.auth import ALLOW_SHARED_ENV, Tokens, check_secret_file, load_credential

    f = tmp_path / "tokens"
    f.write_text("app0 abcdefghijklmnopqrstuvwxyz\n")
    for mode in (0o644, 0o640, 0o604):
        f.chmod(mode)
        with pytest.raises(AuthError, match=rf"token file: .*tokens is readable by group or others "
                                            rf"\(mode {mode:04o}\): run chmod 600"):
            Tokens.load(str(f))
        with pytest.raises(AuthError, match="readable by group or others"):
            load_credential(str(f))
    f.chmod(0o600)
    assert Tokens.load(str(f)).verify("abcdefghijklmnopqrstuvwxyz") == "app0"
    f.chmod(0o640)
    monkeypatch.setenv(ALLOW_SHARED_ENV, "1")
    with caplog.at_level("WARNING"):
        assert Tokens.load(str(f)).verify("abcdefghijklmnopqrstuvwxyz") == "app0"
        check_secret_file(str(f))
    assert sum("readable by group or others" in r.getMessage() for r in caplog.records) == 1  # once a file
