"""README's "Running it against your memcached fleet", run as written: its topology (with
this machine's addresses in place of the example's) and every command of the section, in
order, against two real memcached instances and a real RBC server. Holds the recipe: a
field the readers start to require, or a command that changes, fails here."""
from __future__ import annotations

import re
import shlex
import subprocess
import sys
import urllib.request
from pathlib import Path

from conftest import go_binary, wait_tcp, wait_until

REPO = Path(__file__).resolve().parents[1]


def section() -> str:
    text = (REPO / "README.md").read_text()
    start = text.index("## Running it against your memcached fleet")
    return text[start:text.index("\n## ", start + 1)]


def test_the_attach_recipe_works_as_written(procs, free_address, tmp_path: Path) -> None:
    sec = section()
    topo_text = re.search(r"```yaml\n(.*?)```", sec, re.S).group(1)  # type: ignore[union-attr]
    topo_text = "\n".join(line[3:] if line.startswith("   ") else line for line in topo_text.splitlines())
    commands = [c for c in re.findall(r"`((?:bin/|robinhood-controller )[^`]*)`", sec.replace("\n   ", " "))
                if "topo.yaml" in c]
    assert [c.split()[0] + " " + c.split()[1] for c in commands] == [
        "bin/topocheck topo.yaml", "bin/rbcserver --topology", "robinhood-controller status",
        "robinhood-controller plan", "robinhood-controller run", "robinhood-controller run"], commands

    # This machine's addresses for the example's.
    mc = [procs.memcached(64)[1] for _ in range(2)]
    rbc_grpc, rbc_http, metrics = free_address(), free_address(), free_address()
    for old, new in (("rbc.internal:7070", rbc_grpc), ("rbc.internal:7071", rbc_http),
                     ("10.0.0.5:11211", mc[0]), ("10.0.0.5:11212", mc[1]), ("127.0.0.1:9100", metrics)):
        assert old in topo_text
        topo_text = topo_text.replace(old, new)
    (tmp_path / "topo.yaml").write_text(topo_text)

    def argv(cmd: str) -> list[str]:
        words = [str(tmp_path / w) if w == "topo.yaml" else w for w in shlex.split(cmd)]
        if words[0].startswith("bin/"):
            return [str(go_binary(words[0].removeprefix("bin/"))), *words[1:]]
        return [sys.executable, "-m", "robinhood_controller.cli", *words[1:]]

    def run(cmd: str) -> subprocess.CompletedProcess[str]:
        r = subprocess.run(argv(cmd), cwd=tmp_path, capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, f"{cmd}: exit {r.returncode}\n{r.stdout}\n{r.stderr}"
        return r

    run(commands[0])                                                  # 1. topocheck
    rbc = procs.start(argv(commands[1]), name="rbcserver")            # 2. the RBC server
    wait_tcp(rbc_grpc, timeout=60, proc=rbc)
    status = run(commands[2])                                         # 3. status, plan, a dry run
    assert "catalog" in status.stdout and "reviews" in status.stdout
    plan = run(commands[3])
    assert "catalog" in plan.stdout
    dry = run(commands[4])
    assert dry.stderr.count("event=tick ") == 3 and "read_only=True" in dry.stderr, dry.stderr
    limits = [int(x) for x in subprocess.run(
        [sys.executable, "-c", "import mcdata, sys; print(mcdata.limit_mb(sys.argv[1]), mcdata.limit_mb(sys.argv[2]))",
         *mc], cwd=REPO / "controller" / "tests", capture_output=True, text=True, check=True).stdout.split()]
    assert limits == [64, 64]  # status, plan and the dry run changed nothing
    ctl = procs.start(argv(commands[5]), name="controller")           # 4. the controller, and its metrics
    wait_until(lambda: ctl.poll() is not None or b"controller_partition_limit_bytes{" in _get(f"http://{metrics}/metrics"),
               "the controller's /metrics serves controller_partition_limit_bytes", timeout=90)
    assert ctl.poll() is None, procs.log(ctl)
    page = _get(f"http://{metrics}/metrics").decode()
    assert 'controller_partition_limit_bytes{partition="catalog"}' in page and "controller_partition_rbc{" in page


def _get(url: str) -> bytes:
    try:
        with urllib.request.urlopen(url, timeout=2) as r:
            return r.read()
    except OSError:
        return b""
