"""robinhood-report: stream request records from standard input to the RBC server, for
application servers that log their requests rather than link this package (paper
§3.3: production logging already holds what the RBC needs).

Each input line is ``LATENCY_US BACKEND`` (BACKEND: a topology id, or a name given in
--backend NAME=ID); blank lines and '#' comments are skipped. A malformed line is
reported on stderr with its number and skipped. The exit status is 0 when every record
read reached the RBC server's window, 1 when any did not (a bad line, a record refused or
lost: the summary on stderr says which), 2 for bad arguments.
"""
from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from .reporter import MAX_BACKENDS, MAX_UINT32, Reporter


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="robinhood-report", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rbc", required=True, metavar="HOST:PORT", help="the RBC server's gRPC address")
    p.add_argument("--app-server", required=True, help="this app server's id in the topology")
    p.add_argument("--backend", action="append", default=[], metavar="NAME=ID", help="a backend's name and id")
    p.add_argument("--token-file", help="this caller's token file (docs/security.md)")
    p.add_argument("--tls-ca", help="verify the server with this CA bundle (PEM)")
    p.add_argument("--tls-cert", help="client certificate (mutual TLS)")
    p.add_argument("--tls-key", help="client key (mutual TLS)")
    p.add_argument("--buffer", type=int, default=65536, help="records buffered at most (default 65536)")
    p.add_argument("--max-backends", type=int, default=MAX_BACKENDS,
                   help=f"backend ids are below this (the RBC server's --max-backends; default {MAX_BACKENDS})")
    ns = p.parse_args(argv)
    backends: dict[str, int] = {}
    for b in ns.backend:
        name, sep, bid = b.partition("=")
        if not sep or not name or not bid.isdigit():
            p.error(f"--backend {b!r}: want NAME=ID with a non-negative integer ID")
        backends[name] = int(bid)
    try:
        rep = Reporter(ns.rbc, ns.app_server, backends, buffer=ns.buffer, max_backends=ns.max_backends,
                       token_file=ns.token_file,
                       tls_ca=ns.tls_ca, tls_cert=ns.tls_cert, tls_key=ns.tls_key)
    except (ValueError, OSError) as e:
        print(f"robinhood-report: {e}", file=sys.stderr)
        return 2
    bad = 0
    with rep:
        for n, line in enumerate(sys.stdin, start=1):
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            f = line.split()
            if len(f) != 2 or not f[0].isdigit():
                bad += 1
                print(f"robinhood-report: line {n}: want 'LATENCY_US BACKEND', got {line[:80]!r}", file=sys.stderr)
                continue
            be: int | str = int(f[1]) if f[1].isdigit() else f[1]
            before = rep.stats()
            if not rep.record(int(f[0]), be):
                after = rep.stats()
                if after.unknown_backend > before.unknown_backend:
                    why = f"backend {be!r} is not given by --backend"
                elif after.invalid > before.invalid:
                    why = (f"latency {f[0]} is beyond 4294967295 µs" if int(f[0]) > MAX_UINT32
                           else f"backend id {be} is not below --max-backends {ns.max_backends}"
                           + (" or not one of the --backend ids" if backends else ""))
                else:
                    why = "the buffer is full (the RBC server is away or slow)"
                bad += 1
                if bad <= 20:
                    print(f"robinhood-report: line {n}: not recorded: {why}", file=sys.stderr)
        rep.flush()
    s = rep.stats()
    print(f"robinhood-report: {s.recorded} records taken, {s.sent} sent, {s.lost} lost, {s.refused} refused by "
          f"the server, {s.dropped} dropped, {bad} bad lines, {s.stream_errors} stream errors", file=sys.stderr)
    if bad or s.not_stored or s.sent < s.recorded:
        print("robinhood-report: some records did not reach the RBC server (exit 1)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
