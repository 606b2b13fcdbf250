"""Static checks of docker-compose.yml (`make compose-check` runs it under podman): it is what
`robinhood-testbed compose` makes of examples/demo.yaml (so it cannot drift from the
demo), the file passes Debian's `docker-compose config -q`, every command-line flag it
passes to our binaries exists in their --help, the topology it ships is valid for both
readers, Prometheus scrapes every component that serves metrics, and every upstream
image it and the Dockerfiles name has a stand-in for compose-check."""
from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Callable, Iterator

import pytest
import yaml

from robinhood_common.topology import load as load_topology
from robinhood_testbed import compose as compose_gen
from robinhood_testbed.experiment import arms, load as load_experiment

REPO = Path(__file__).resolve().parents[1]
COMPOSE = REPO / "docker-compose.yml"

#: Our programs and the command that prints the flags of each of their subcommands.
GO_BINARIES = {"rbcserver", "rbcload", "appserver", "backend", "backendload", "tracegen"}
SUBCOMMANDS = {"tracegen": {"synth", "stats", "replay", "scenario"},
               "robinhood-controller": {"run", "plan", "status", "policies"}}


def compose() -> dict:
    return yaml.safe_load(COMPOSE.read_text())


def test_compose_files_are_generated_from_the_demo_experiment(gobin: Callable[[str], Path]) -> None:
    exp = load_experiment(REPO / "examples" / "demo.yaml")
    arm = arms(exp)[0]
    assert arm.name == "relief"  # the recommended policy, the demo's first arm
    for rel, text in compose_gen.generate(exp, arm, Path("examples/demo.yaml")).items():
        assert (REPO / rel).read_text() == text, (
            f"{rel} differs from what the demo experiment makes: run "
            "'.venv/bin/robinhood-testbed compose --experiment examples/demo.yaml --out .'")


def test_compose_config_is_valid() -> None:
    exe = shutil.which("docker-compose")
    if exe is None:
        pytest.fail("docker-compose is not installed: run 'make deps' (as root it installs Debian's docker-compose)")
    res = subprocess.run([exe, "-f", str(COMPOSE), "config", "-q"], cwd=REPO, capture_output=True, text=True)
    assert res.returncode == 0, res.stderr


def invocations(command: list[str] | str) -> Iterator[list[str]]:
    """The program invocations of a service command (a list, or `sh -c "a && b"`)."""
    argv = shlex.split(command) if isinstance(command, str) else [str(a) for a in command]
    if len(argv) >= 3 and argv[0] in ("sh", "/bin/sh", "bash") and argv[1] == "-c":
        for part in re.split(r"&&|;|\|\|", argv[2]):
            if part.strip():
                yield shlex.split(part)
        return
    yield argv


def help_text(argv: list[str], gobin: Callable[[str], Path]) -> str:
    prog = Path(argv[0]).name
    sub = argv[1] if len(argv) > 1 and argv[1] in SUBCOMMANDS.get(prog, ()) else None
    if prog in GO_BINARIES:
        cmd = [str(gobin(prog))]
    elif prog == "robinhood-controller":
        cmd = [sys.executable, "-m", "robinhood_controller.cli"]
    else:
        raise AssertionError(f"docker-compose.yml runs {prog!r}, which is not one of our programs")
    if sub:
        cmd.append(sub)
    res = subprocess.run([*cmd, "--help"], capture_output=True, text=True, timeout=30)
    return res.stdout + res.stderr


def our_commands() -> list[tuple[str, list[str]]]:
    out = []
    for name, svc in compose()["services"].items():
        image = str(svc.get("image", ""))
        if "command" not in svc or "memcached" in image or "prometheus" in image:
            continue
        for argv in invocations(svc["command"]):
            out.append((name, argv))
    return out


def test_every_flag_exists(gobin: Callable[[str], Path]) -> None:
    cmds = our_commands()
    assert {Path(a[0]).name for _, a in cmds} >= {"rbcserver", "backend", "appserver", "tracegen", "robinhood-controller"}
    checked = 0
    for service, argv in cmds:
        text = help_text(argv, gobin)
        for tok in argv[1:]:
            if not tok.startswith("-") or tok in ("-", "--"):
                continue
            flag = tok.lstrip("-").split("=", 1)[0]
            # Go's flag package prints "-flag", argparse prints "--flag".
            assert re.search(rf"(^|[\s,\[])--?{re.escape(flag)}\b", text, re.M), (
                f"service {service}: {Path(argv[0]).name} has no flag --{flag} (checked against its --help)")
            checked += 1
    assert checked > 30


def test_shipped_topology_is_valid_and_matches_services(gobin: Callable[[str], Path]) -> None:
    topo_path = REPO / "deploy" / "compose" / "topology.yaml"
    topo = load_topology(topo_path)
    services = set(compose()["services"])
    host = lambda addr: addr.rsplit(":", 1)[0]  # noqa: E731
    needed = {host(topo.rbc_server.grpc)}
    for b in topo.backends:
        for r in b.replicas:
            needed |= {host(r.grpc), host(r.http)}
    for a in topo.app_servers:
        needed.add(host(a.http))
        needed |= {host(p.addr) for p in a.partitions.values()}
    missing = needed - services
    assert not missing, f"topology names hosts that are not services: {sorted(missing)}"
    # The Go loader accepts it too.
    res = subprocess.run([str(gobin("topocheck")), str(topo_path)], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr


def test_prometheus_scrapes_every_component() -> None:
    prom = yaml.safe_load((REPO / "deploy" / "compose" / "prometheus.yml").read_text())
    targets = {t.rsplit(":", 1)[0] for job in prom["scrape_configs"] for sc in job["static_configs"] for t in sc["targets"]}
    services = compose()["services"]
    expected = {n for n, s in services.items()
                if "memcached" not in str(s.get("image", "")) and "prometheus" not in n}
    assert expected <= targets, f"not scraped: {sorted(expected - targets)}"


def test_compose_on_redis_partitions(tmp_path: Path, gobin: Callable[[str], Path]) -> None:
    """cache.store redis: one redis-server service per partition, named in the topology."""
    doc = yaml.safe_load((REPO / "examples" / "demo.yaml").read_text())
    doc["cache"]["store"] = "redis"
    exp_path = REPO / "examples" / "redis-demo.tmp.yaml"  # relative paths of the demo stay valid
    try:
        exp_path.write_text(yaml.safe_dump(doc))
        exp = load_experiment(exp_path)
    finally:
        exp_path.unlink()
    arm = arms(exp)[0]
    files = compose_gen.generate(exp, arm, Path("examples/demo.yaml"))
    services = yaml.safe_load(files["docker-compose.yml"])["services"]
    topo_text = files["deploy/compose/topology.yaml"]
    topo = yaml.safe_load(topo_text)
    parts = topo["app_servers"][0]["partitions"]
    assert set(parts) == {b["name"] for b in doc["backends"]}
    for name, p in parts.items():
        host = p["redis"].rsplit(":", 1)[0]
        assert host == f"redis-app0-{name}" and "addr" not in p
        svc = services[host]
        assert svc["image"].startswith("redis:")
        cmd = svc["command"]
        assert cmd[0] == "redis-server" and "allkeys-lru" in cmd
        # Started at the floor: the controller's first tick takes initial_mb.
        assert cmd[cmd.index("--maxmemory") + 1] == f"{doc['controller']['min_partition_mb']}mb"
    assert not any(n.startswith("mc-app0-") for n in services)
    for rel, text in files.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    res = subprocess.run([str(gobin("topocheck")), str(tmp_path / "deploy" / "compose" / "topology.yaml")],
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    exe = shutil.which("docker-compose")
    assert exe is not None, "docker-compose is not installed: run 'make deps'"
    res = subprocess.run([exe, "-f", str(tmp_path / "docker-compose.yml"), "config", "-q"], cwd=tmp_path,
                         capture_output=True, text=True)
    assert res.returncode == 0, res.stderr


def _qualified(ref: str) -> str:
    """An image reference as podman resolves a short name (docker.io/library/...)."""
    if ref.count("/") >= 2 or ref.startswith("localhost/"):
        return ref
    return f"docker.io/{ref}" if "/" in ref else f"docker.io/library/{ref}"


def test_every_upstream_image_has_a_stand_in() -> None:
    """scripts/compose-check.sh builds deploy/docker/standins/ where no registry is: a
    base image bumped in a Dockerfile (or the compose file) without its stand-in would
    fail there, late; here it fails at once."""
    named = set()
    for df in (REPO / "deploy" / "docker").glob("Dockerfile*"):
        named |= {m.group(1) for m in re.finditer(r"^FROM (\S+)", df.read_text(), re.M)}
    named |= {m.group(1) for m in re.finditer(r"^ *image: ([^$\s]\S*)$", COMPOSE.read_text(), re.M)}
    assert named, "no upstream image found"
    stand_ins = {}
    for cf in (REPO / "deploy" / "docker" / "standins").glob("*.Containerfile"):
        m = re.search(r"^# stands-in-for: (\S+)$", cf.read_text(), re.M)
        assert m, f"{cf.name}: no '# stands-in-for:' line"
        stand_ins[m.group(1)] = cf.name
    missing = {_qualified(r) for r in named} - set(stand_ins)
    assert not missing, f"upstream images without a stand-in in deploy/docker/standins/: {sorted(missing)}"
