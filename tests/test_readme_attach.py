"""README's "Running it against your memcached fleet", run as written: its credentials,
its topology (with this machine's addresses in place of the example's), its reporter
code and every command of the section, in order, against two real memcached instances
and a real RBC server, with tokens and TLS on. Holds the recipe: a field the readers
start to require, a credential the recipe forgets, or a command that changes, fails
here."""
from __future__ import annotations

import re
import shlex
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Callable

from conftest import Procs, go_binary, wait_tcp, wait_until

REPO = Path(__file__).resolve().parents[1]


def section() -> str:
    text = (REPO / "README.md").read_text()
    start = text.index("## Running it against your memcached fleet")
    return text[start:text.index("\n## ", start + 1)]


def block(sec: str, lang: str) -> str:
    """The section's one fenced block of lang, without the list item's indentation."""
    blocks = re.findall(rf"```{lang}\n(.*?)```", sec, re.S)
    assert len(blocks) == 1, f"want one {lang} block in the section, found {len(blocks)}"
    return textwrap.dedent(blocks[0])


def argv(cmd: str, folder: Path) -> list[str]:
    """cmd's words, run from folder: topo.yaml is folder's (the servers' relative paths are
    the topology file's), bin/ the project's, the Python commands this interpreter's."""
    words = [str(folder / w) if w == "topo.yaml" else w for w in shlex.split(cmd)]
    if words[0].startswith("bin/"):
        return [str(go_binary(words[0].removeprefix("bin/"))), *words[1:]]
    if words[0] in ("robinhood-controller", "robinhood-report"):
        module = "robinhood_controller.cli" if words[0] == "robinhood-controller" else "robinhood_report.cli"
        return [sys.executable, "-m", module, *words[1:]]
    return words


def test_the_attach_recipe_works_as_written(procs: Procs, free_address: Callable[[], str], tmp_path: Path) -> None:
    sec = section()
    topo_text, reporter_code = block(sec, "yaml"), block(sec, "python")
    commands = re.findall(r"`((?:bin/|robinhood-controller |robinhood-report |curl )[^`]*)`",
                          sec.replace("\n   ", " "))
    assert [" ".join(c.split()[:2]) for c in commands] == [
        "bin/devcerts --out", "bin/topocheck topo.yaml", "bin/rbcserver --topology", "robinhood-report --rbc",
        "robinhood-controller status", "robinhood-controller plan", "robinhood-controller run",
        "robinhood-controller run", "curl -fsS"], commands
    devcerts, topocheck, rbcserver, report, status, plan, dry, ctl_run, curl = commands
    assert "auth:" in topo_text and "tls:" in topo_text, "the recipe's topology lost its credentials"

    def run(cmd: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        r = subprocess.run(argv(cmd, tmp_path), cwd=tmp_path, input=stdin, capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, f"{cmd}: exit {r.returncode}\n{r.stdout}\n{r.stderr}"
        return r

    run(devcerts)                                                      # 1. the credentials
    # 2. As written, with the README's own non-loopback rbc.internal:7070: the RBC server's
    # guard takes the recipe (it gets as far as listening, on a name this machine lacks) ...
    topo = tmp_path / "topo.yaml"
    topo.write_text(topo_text)
    run(topocheck)
    _starts_past_the_guard(procs, argv(rbcserver, tmp_path))
    # ... where the same file without its auth block is refused, as the issue saw it.
    topo.write_text("\n".join(ln for ln in topo_text.splitlines() if not ln.startswith("auth:")) + "\n")
    r = subprocess.run(argv(rbcserver, tmp_path), cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "not a loopback address and no --auth-token-file" in r.stderr, r.stderr

    # This machine's addresses for the example's, everywhere.
    mc = [procs.memcached(64)[1] for _ in range(2)]
    rbc_grpc, rbc_http, metrics = free_address(), free_address(), free_address()
    subs = (("rbc.internal:7070", rbc_grpc), ("rbc.internal:7071", rbc_http),
            ("10.0.0.5:11211", mc[0]), ("10.0.0.5:11212", mc[1]), ("127.0.0.1:9100", metrics))

    def local(text: str) -> str:
        for old, new in subs:
            text = text.replace(old, new)
        return text

    for old, _ in subs:
        assert old in topo_text, old
    topo.write_text(local(topo_text))
    run(topocheck)
    rbc = procs.start(argv(local(rbcserver), tmp_path), name="rbcserver")   # 3. the RBC server
    wait_tcp(rbc_grpc, timeout=60, proc=rbc)
    wait_until(lambda: "security=tokens(2)+tls" in procs.log(rbc), "the RBC server logs security=tokens(2)+tls",
               timeout=60)
    # The reporters, with web1's token over TLS: the library as the README builds it ...
    code = local(reporter_code) + textwrap.dedent("""
        for i in range(300):
            rep.record(latency_us=1000 + i, backend="catalog" if i % 3 else "reviews")
        rep.close()
        s = rep.stats()
        print(s.recorded, s.sent, s.not_stored, s.stream_errors)
        """)
    r = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.split() == ["300", "300", "0", "0"], (r.stdout, r.stderr)
    # ... and the command on a request log's lines (it exits 1 when a record did not arrive).
    run(local(report), stdin="".join(f"{2000 + i} {'reviews' if i % 2 else 'catalog'}\n" for i in range(200)))

    status = run(status)                                               # 4. status, plan, a dry run
    assert "catalog" in status.stdout and "reviews" in status.stdout
    assert "catalog" in run(plan).stdout
    dry_run = run(dry)
    assert dry_run.stderr.count("event=tick ") == 3 and "read_only=True" in dry_run.stderr, dry_run.stderr
    limits = [int(x) for x in subprocess.run(
        [sys.executable, "-c", "import mcdata, sys; print(mcdata.limit_mb(sys.argv[1]), mcdata.limit_mb(sys.argv[2]))",
         *mc], cwd=REPO / "controller" / "tests", capture_output=True, text=True, check=True).stdout.split()]
    assert limits == [64, 64]  # status, plan and the dry run changed nothing
    ctl = procs.start(argv(ctl_run, tmp_path), name="controller")  # 5. the controller, and its metrics
    page = ""

    def served() -> bool:
        nonlocal page
        assert ctl.poll() is None, procs.log(ctl)
        r = subprocess.run(["bash", "-c", local(curl)], cwd=tmp_path, capture_output=True, text=True, timeout=30)
        page = r.stdout if r.returncode == 0 else ""
        return "controller_partition_limit_bytes{" in page

    wait_until(served, "the README's curl line reads controller_partition_limit_bytes", timeout=90, interval=0.5)
    assert 'controller_partition_limit_bytes{partition="catalog"}' in page and "controller_partition_rbc{" in page
    # The page needs the token: without it, 401.
    r = subprocess.run(["bash", "-c", re.sub(r'-H "[^"]*" ', "", local(curl))], cwd=tmp_path,
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 22 and "401" in r.stderr, (r.returncode, r.stderr)


def _starts_past_the_guard(procs: Procs, args: list[str]) -> None:
    """args (an RBC server on the README's rbc.internal) passes the security guard:
    it exits only because it cannot listen on that name here, or it serves."""
    p = procs.start(args, name="rbcserver-as-written")
    wait_until(lambda: p.poll() is not None or "security=" in procs.log(p),
               "the RBC server on rbc.internal:7070 exits or serves", timeout=60)
    log = procs.log(p)
    assert "not a loopback address" not in log, log
    if p.poll() is not None:
        assert p.returncode == 1 and "cannot listen for gRPC" in log and "rbc.internal:7070" in log, log
    Procs.stop(p)
