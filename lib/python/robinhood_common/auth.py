"""Bearer tokens and TLS settings for the Python clients and servers (docs/security.md).

The token file format is the Go servers' (``lib/auth``): one ``name token`` pair per
line, blank lines and ``#`` comments ignored, names of 1-64 characters of letters,
digits, ``_ . -``, tokens of at least 16 characters of the bearer alphabet, no token on
two lines. Both readers run the vectors of ``tests/vectors/auth``.
"""
from __future__ import annotations

import hashlib
import ipaddress
import logging
import os
import re
import ssl
import stat
import threading
import time
from typing import Generic, TypeVar
from dataclasses import dataclass

from .files import FileTooLarge, read_bounded

log = logging.getLogger("robinhood_common.auth")

MIN_TOKEN_LEN = 16
#: The largest token file read (a line a caller: thousands of callers); the Go twin is
#: lib/auth.MaxTokenFileBytes.
MAX_TOKEN_FILE_BYTES = 1 << 20
#: The largest certificate, key or CA bundle read (a system's CA bundle is about 200 KB);
#: the Go twin is lib/auth.MaxPEMBytes.
MAX_PEM_BYTES = 1 << 20
_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
_TOKEN = re.compile(r"^[A-Za-z0-9._~+/-]+=*$")


class AuthError(ValueError):
    """A token or certificate file that cannot be used; the message names the file and
    line, never the token."""


@dataclass(frozen=True)
class Entry:
    name: str
    token: str


def parse_tokens(src: str, text: str) -> list[Entry]:
    """The entries of a token file's text; AuthError names src, the line and the fault."""
    out: list[Entry] = []
    seen: dict[str, int] = {}
    for n, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        f = line.split()
        if len(f) != 2:
            raise AuthError(f'{src}:{n}: want "name token", found {len(f)} fields')
        name, tok = f
        if not _NAME.match(name):
            raise AuthError(f"{src}:{n}: name {_go_quote(name)} must be 1-64 characters of letters, digits, "
                            "'_', '.', '-'")
        if len(tok) < MIN_TOKEN_LEN:
            raise AuthError(f"{src}:{n}: the token of {_go_quote(name)} has {len(tok)} characters; "
                            f"at least {MIN_TOKEN_LEN} are required")
        if not _TOKEN.match(tok):
            raise AuthError(f"{src}:{n}: the token of {_go_quote(name)} has characters outside "
                            "A-Z a-z 0-9 - . _ ~ + / (and trailing =)")
        if tok in seen:
            raise AuthError(f"{src}:{n}: the token of {_go_quote(name)} is the same as on line {seen[tok]}: "
                            "every caller needs its own")
        seen[tok] = n
        out.append(Entry(name, tok))
    if not out:
        raise AuthError(f'{src}: no "name token" line')
    return out


def _go_quote(s: str) -> str:
    """A string quoted as Go's %q quotes it (for the printable ASCII of names)."""
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


#: The environment variable that lets a secret (a token file, a TLS key) be readable by
#: its group or by others: "1" accepts such a file with a warning (the Go twin:
#: lib/auth.AllowSharedEnv; docs/security.md, "Files").
ALLOW_SHARED_ENV = "ROBINHOOD_ALLOW_SHARED_SECRETS"
_warned: set[str] = set()


def check_secret_file(path: str) -> None:
    """AuthError when a secret file is readable by its group or others, unless
    ALLOW_SHARED_ENV is "1" (then it is logged once). A path that cannot be stat'ed or is
    not a regular file is left to the reader, which names the problem."""
    try:
        st = os.stat(path)
    except OSError:
        return
    mode = st.st_mode & 0o777
    if mode & 0o077 == 0 or not stat.S_ISREG(st.st_mode):  # a device or a FIFO is the reader's to refuse
        return
    if os.environ.get(ALLOW_SHARED_ENV) == "1":
        if path not in _warned:
            _warned.add(path)
            log.warning("event=shared_secret file=%s mode=%04o msg=%r", path, mode,
                        f"readable by group or others; accepted because {ALLOW_SHARED_ENV}=1")
        return
    raise AuthError(f"{path} is readable by group or others (mode {mode:04o}): run chmod 600 {path} (or set "
                    f"{ALLOW_SHARED_ENV}=1 where a platform shares it through a group on purpose, with a warning)")


def _read(path: str) -> str:
    try:
        check_secret_file(path)
    except AuthError as e:
        raise AuthError(f"token file: {e}") from None
    try:
        return read_bounded(path, MAX_TOKEN_FILE_BYTES).decode("utf-8", errors="replace")
    except OSError as e:
        raise AuthError(f"token file: {_op(e)} {path}: {e.strerror}") from None


def _op(e: OSError) -> str:
    """The operation an OSError of a read names, as Go's errors do ("open", "read")."""
    return "read" if isinstance(e, FileTooLarge) else "open"


class Tokens:
    """A server's verifier: token → caller name (hashed, as the Go servers do)."""

    def __init__(self, entries: list[Entry]) -> None:
        self._by_hash = {hashlib.sha256(e.token.encode()).digest(): e.name for e in entries}

    @classmethod
    def load(cls, path: str) -> Tokens:
        return cls(parse_tokens(path, _read(path)))

    def verify(self, token: str) -> str | None:
        """The caller's name, or None for an unknown token."""
        if not token:
            return None
        return self._by_hash.get(hashlib.sha256(token.encode()).digest())

    def check_header(self, value: str | None) -> str | None:
        """The caller of an ``Authorization: Bearer TOKEN`` value, or None."""
        if not value or len(value) <= 7 or value[:7].lower() != "bearer ":
            return None
        return self.verify(value[7:].strip())


def _stamp(path: str) -> tuple[float, int, int] | None:
    """A file's (mtime, size, inode), None when it cannot be read: what changes when a
    file is rewritten or replaced."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_mtime, st.st_size, st.st_ino


T = TypeVar("T")


class _WatchedFile(Generic[T]):
    """A file's parsed contents, re-read on :meth:`reload` (SIGHUP) and when the file
    changes (checked at most once a second), as the Go readers do. A file that no
    longer reads keeps the previous contents, and is logged."""

    what = "file"
    """What the file holds, for the log line."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._value = self._load(path)
        self._stamp = _stamp(path)
        self._checked = time.monotonic()
        self._lock = threading.Lock()

    @staticmethod
    def _load(path: str) -> T:
        raise NotImplementedError

    def reload(self) -> bool:
        """Re-read the file now; False (logged) when it does not read."""
        stamp = _stamp(self.path)
        try:
            value = self._load(self.path)
        except AuthError as e:
            log.warning("event=error kind=token_file msg=%r (the previous %s stays)", str(e), self.what)
            with self._lock:
                self._stamp = stamp  # logged once per change of the file, not every second
            return False
        with self._lock:
            self._value, self._stamp = value, stamp
        return True

    def current(self) -> T:
        """The contents, re-read first when the file changed."""
        now = time.monotonic()
        with self._lock:
            changed = False
            if now - self._checked >= 1.0:
                self._checked = now
                stamp = _stamp(self.path)
                changed = stamp is not None and stamp != self._stamp
        if changed:
            self.reload()
        return self._value


class TokensFile(_WatchedFile[Tokens]):
    """A server's token file, verified like :class:`Tokens`, kept current."""

    what = "tokens"
    _load = staticmethod(Tokens.load)

    def check_header(self, value: str | None) -> str | None:
        """The caller of an ``Authorization: Bearer TOKEN`` value, or None."""
        return self.current().check_header(value)


def load_credential(path: str) -> Entry:
    """A caller's own token file: exactly one line."""
    e = parse_tokens(path, _read(path))
    if len(e) != 1:
        raise AuthError(f'{path}: a caller\'s token file holds one "name token" line, this one has {len(e)}')
    return e[0]


class Credential(_WatchedFile[Entry]):
    """A caller's token, kept current, so that a rotated token is picked up without a
    restart."""

    what = "token"
    _load = staticmethod(load_credential)

    @property
    def name(self) -> str:
        return self._value.name

    def token(self) -> str:
        return self.current().token

    def metadata(self) -> tuple[tuple[str, str], ...]:
        """gRPC call metadata carrying the token."""
        return (("authorization", "Bearer " + self.token()),)


def is_loopback(host: str) -> bool:
    """Whether a listen host is reachable from this machine only (the Go rule: localhost
    or a loopback IP; an empty host, 0.0.0.0, :: or another name is not)."""
    h = host.strip("[]")
    if h.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(h).is_loopback
    except ValueError:
        return False


def server_ssl_context(cert: str, key: str, client_ca: str | None, *, required: bool = True) -> ssl.SSLContext:
    """TLS for a Python listener (TLS 1.2+); client certificates signed by client_ca
    are required when it is given (or, with required=False, verified when given: an
    HTTP server then refuses the paths that need one itself, so that probes without a
    certificate can read /healthz)."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    load_server_files(ctx, cert, key, client_ca)
    if client_ca:
        ctx.verify_mode = ssl.CERT_REQUIRED if required else ssl.CERT_OPTIONAL
    return ctx


def load_server_files(ctx: ssl.SSLContext, cert: str, key: str, client_ca: str | None) -> None:
    """Load a server's certificate chain, key and (when given) client CA bundle into ctx,
    at start and on SIGHUP; AuthError names the file. Each must be a regular file of at
    most MAX_PEM_BYTES (read_pem's rule): OpenSSL reads the chain and key from their paths
    itself, so they are checked first, and a named pipe or a device never reaches it."""
    try:
        check_secret_file(key)
    except AuthError as e:
        raise AuthError(f"TLS key: {e}") from None
    read_pem(cert, "TLS certificate")
    read_pem(key, "TLS key")
    ca = read_pem(client_ca, "TLS client CA") if client_ca else None
    try:
        ctx.load_cert_chain(cert, key)
        if ca is not None:
            ctx.load_verify_locations(cadata=ca.decode("ascii", errors="replace"))
    except (OSError, ssl.SSLError, ValueError) as e:
        raise AuthError(f"TLS certificate {cert} with key {key}: {e}") from None


def client_tls_files(ca: str, cert: str | None, key: str | None) -> tuple[bytes, bytes | None, bytes | None]:
    """The CA bundle a client verifies servers with and, for mutual TLS, the certificate
    chain and key it presents: read (read_pem's rule) and parsed as OpenSSL will use them,
    so that a file without a certificate fails at start, naming it, as the Go clients'
    (lib/auth) and topocheck do, not at the first connection. (ca, cert, key) bytes."""
    ca_pem = read_pem(ca, "tls.ca")
    try:
        ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT).load_verify_locations(cadata=ca_pem.decode("ascii", errors="replace"))
    except (ssl.SSLError, ValueError):
        raise AuthError(f"tls.ca: {ca} holds no PEM certificate") from None
    if not cert or not key:
        return ca_pem, None, None
    try:
        check_secret_file(key)
    except AuthError as e:
        raise AuthError(f"TLS key: {e}") from None
    cert_pem, key_pem = read_pem(cert, "TLS certificate"), read_pem(key, "TLS key")
    try:
        ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT).load_cert_chain(cert, key)
    except (OSError, ssl.SSLError) as e:
        raise AuthError(f"TLS certificate {cert} with key {key}: {e}") from None
    return ca_pem, cert_pem, key_pem


def read_pem(path: str, what: str) -> bytes:
    """A PEM file's bytes; a key (what ends in "key") is a secret (check_secret_file)."""
    if what.endswith("key"):
        check_secret_file(path)
    try:
        return read_bounded(path, MAX_PEM_BYTES)
    except OSError as e:
        raise AuthError(f"{what}: {_op(e)} {path}: {e.strerror}") from None
