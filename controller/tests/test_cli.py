"""The robinhood-controller command line: exit codes, messages, plan and status output."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import grpc
import pytest
import mcdata
from mcdata import fill, limit_mb, malloced, stats
from robinhood.v1 import rbc_pb2, rbc_pb2_grpc

from conftest import wait_tcp
from robinhood_controller.cli import main
from robinhood_controller.metrics import Metrics
from robinhood_controller.policies import MOVE_REASONS

CLI = [sys.executable, "-m", "robinhood_controller.cli"]


def _write(tmp_path: Path, addrs: dict[str, str], rbc: str = "127.0.0.1:1", controller: str = "{min_partition_mb: 16, policy: robinhood}",
           budget: int | None = None, extra: str = "") -> Path:
    parts = ", ".join(f"{n}: {a}" for n, a in addrs.items())
    backends = "\n".join(
        f"  - {{id: {i}, name: {n}, type: kv, replicas: [{{grpc: 127.0.0.1:1}}]}}" for i, n in enumerate(addrs))
    p = tmp_path / "topology.yaml"
    p.write_text(f"""
rbc_server: {{grpc: {rbc}, window: 1m}}
backends:
{backends}
app_servers:
  - id: app0
    http: 127.0.0.1:1
    cache_mode: partitioned
    cache_budget_mb: {budget or 32 * len(addrs)}
    partitions: {{{parts}}}
    controller: {controller}
{extra}""")
    return p


def _run(*args: object, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *map(str, args)], capture_output=True, text=True, timeout=timeout)


def test_invalid_config_exits_2_and_touches_nothing(procs, tmp_path: Path) -> None:
    _, a = procs.memcached(32)
    fill(a, 40)
    before = malloced(a)
    topo = _write(tmp_path, {"a": a}, controller="{min_partition_mb: 16, policy: {name: robinhood, unused_gap: -1}}")
    for cmd in ("run", "plan", "status"):
        r = _run(cmd, "--topology", topo, "--app-server", "app0")
        assert r.returncode == 2, r.stderr
        assert r.stderr.strip().splitlines() == [
            f"robinhood-controller: invalid configuration: topology {topo}: "
            "app_servers[0].controller.policy.unused_gap: -1.0 is out of range [0, 100]"
        ]
    r = _run("run", "--topology", _write(tmp_path, {"a": a}), "--id", "app0", "--policy-param", "tax=0.9")
    assert r.returncode == 2 and "controller.policy.tax (from --policy-param): 0.9 is out of range [0, 0.5]" in r.stderr
    r = _run("run", "--topology", tmp_path / "missing.yaml", "--app-server", "app0")
    assert r.returncode == 2 and "cannot read" in r.stderr and "missing.yaml" in r.stderr
    r = _run("run", "--topology", _write(tmp_path, {"a": a}), "--id", "app0", "--policy-param", "tax=lots")
    assert r.returncode == 2 and 'controller.policy.tax (from --policy-param): "lots" is not a number' in r.stderr
    r = _run("run", "--topology", _write(tmp_path, {"a": a}), "--id", "app0", "--policy-param", "tax")
    assert r.returncode == 2 and "--policy-param: 'tax' is not KEY=VALUE" in r.stderr
    # Nothing was touched: limit, memory and memcached's own page mover are as before.
    assert limit_mb(a) == 32 and malloced(a) == before
    assert stats(a, "settings")["slab_automove"] is True


def _feed(rbc_addr: str, blamed: int, others: list[int]) -> None:
    """One batch of 1000 requests; the slowest 5% are blocked by `blamed`."""
    lat, blk = [], []
    for i in range(1000):
        slow = i % 20 == 0
        lat.append(300_000 + i if slow else 10_000 + i)
        blk.append(blamed if slow else others[i % len(others)])
    with grpc.insecure_channel(rbc_addr) as ch:
        rbc_pb2_grpc.RBCServiceStub(ch).Report(
            iter([rbc_pb2.ReportRequest(app_server_id="app0", latency_us=lat, blocking_backend=blk)]), timeout=5)


def test_plan_prints_current_and_planned_and_changes_nothing(procs, gobin, free_address, tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    addrs = {n: procs.memcached(32)[1] for n in ("catalog", "ratings", "recs")}
    for a in addrs.values():
        fill(a, 40)
    rbc_grpc = free_address()
    rbc = procs.start([gobin("rbcserver"), "--grpc-addr", rbc_grpc, "--http-addr", free_address(), "--window", "1m"],
                      name="rbcserver")
    wait_tcp(rbc_grpc, proc=rbc)
    _feed(rbc_grpc, blamed=1, others=[0, 2])
    topo = _write(tmp_path, addrs, rbc=rbc_grpc, controller="{policy: robinhood, min_partition_mb: 16, interval: 1m}")
    before = {n: (limit_mb(a), malloced(a)) for n, a in addrs.items()}

    assert main(["plan", "--topology", str(topo), "--id", "app0", "--policy-param", "tax=0.05"]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert "RBC: 1000 requests in the last 60s" in out
    header = next(i for i, ln in enumerate(lines) if ln.startswith("partition"))
    rows = {ln.split()[0]: ln.split() for ln in lines[header + 2:header + 5]}
    # ratings is blamed and gets the pool of 3 × 1.6 MB: targets 35.2 / 30.4 / 30.4 MB; the
    # leftover MB goes to the largest remainder (catalog and recs tie at .4, catalog sorts first).
    assert rows["ratings"][5] != "0" and rows["catalog"][5] == "0"
    assert rows["ratings"][7] == "35.20" and rows["catalog"][7] == "30.40"
    assert [rows[n][8] for n in ("catalog", "ratings", "recs")] == ["31.0", "35.0", "30.0"]
    assert [rows[n][9] for n in ("catalog", "ratings", "recs")] == ["-1", "+3", "-2"]
    assert all(float(rows[n][3]) <= 16 for n in rows)  # fill() uses few sizes: the floor is a few MB
    assert "slab classes" not in out
    assert "nothing was changed" in out

    assert main(["plan", "--topology", str(topo), "--app-server", "app0", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    planned = {p["partition"]: p["planned_limit_bytes"] >> 20 for p in doc["partitions"]}
    assert planned == {"catalog": 32, "ratings": 32, "recs": 32}  # tax 1%: 32.64 MB rounds to 32
    assert {p["partition"]: p["target_bytes"] for p in doc["partitions"]}["ratings"] > 32 << 20
    assert doc["window_requests"] == 1000

    assert {n: (limit_mb(a), malloced(a)) for n, a in addrs.items()} == before
    assert all(stats(a, "settings")["slab_automove"] is True for a in addrs.values())


def test_status_table_and_json(procs, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    addrs = {n: procs.memcached(16)[1] for n in "ab"}
    fill(addrs["a"], 20)
    topo = _write(tmp_path, addrs, budget=32)
    assert main(["status", "--topology", str(topo), "--app-server", "app0"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[1].split() == ["partition", "addr", "limit_mb", "used_mb", "malloced_mb", "floor_mb", "items",
                                "evictions", "hit_ratio", "predicted_util", "last_move"]
    a = lines[3].split()
    st = stats(addrs["a"])
    ratio = int(st["get_hits"]) / (int(st["get_hits"]) + int(st["get_misses"]))  # type: ignore[call-overload]
    assert a[0] == "a" and a[2] == "16.0" and int(a[6]) > 0 and int(a[7]) > 0 and a[8] == f"{ratio:.3f}"
    assert 1 <= float(a[5]) <= 16
    assert lines[-1].split()[:2] == ["total", "32.0"]
    assert main(["status", "--topology", str(topo), "--app-server", "app0", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["partitions"][1]["items"] == 0 and doc["partitions"][1]["hit_ratio"] is None
    assert doc["partitions"][0]["limit_bytes"] == 16 << 20
    assert doc["partitions"][0]["predicted_utilization"] is None and "controller.metrics is not set" in doc[
        "controller_error"]


def test_status_shows_what_the_running_controller_says(procs, free_address, tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    # The running controller's /metrics (the real metrics server) says, per partition, its
    # backend's predicted utilization and why it last moved; status shows them.
    addrs = {n: procs.memcached(16)[1] for n in "ab"}
    metrics_addr = free_address()
    topo = _write(tmp_path, addrs, budget=32,
                  controller=f"{{min_partition_mb: 16, policy: relief, metrics: '{metrics_addr}'}}")
    assert main(["status", "--topology", str(topo), "--app-server", "app0"]) == 0
    out = capsys.readouterr().out
    assert "predicted_util and last_move come from the running controller's /metrics" in out
    m = Metrics("app0", "relief", ["a", "b"])
    m.serve(metrics_addr)
    try:
        m.predicted.labels("a").set(0.42)
        for reason in MOVE_REASONS:
            m.move_reason.labels("a", reason).set(1 if reason == "rising" else 0)
        assert main(["status", "--topology", str(topo), "--app-server", "app0"]) == 0
        a = capsys.readouterr().out.splitlines()[3].split()
        assert a[0] == "a" and a[-2:] == ["0.42", "rising"]
        assert main(["status", "--topology", str(topo), "--app-server", "app0", "--json"]) == 0
        doc = json.loads(capsys.readouterr().out)
        assert doc["partitions"][0]["move_reason"] == "rising" and doc["partitions"][1]["move_reason"] is None
        assert doc["controller_error"] is None
    finally:
        m.close()


def test_status_reports_an_unreachable_partition(procs, free_address, tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    _, a = procs.memcached(16)
    topo = _write(tmp_path, {"a": a, "b": free_address()}, budget=32)
    assert main(["status", "--topology", str(topo), "--app-server", "app0"]) == 1
    out = capsys.readouterr().out
    assert "unreachable" in out and "error: partition b" in out


def test_shared_and_none_modes_say_there_is_nothing_to_do(procs, tmp_path: Path,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    _, shared = procs.memcached(16)
    topo = _write(tmp_path, {"a": "127.0.0.1:1"}, extra=f"""
  - id: shared0
    http: 127.0.0.1:2
    cache_mode: shared
    cache_budget_mb: 16
    shared_cache: {shared}
  - id: none0
    http: 127.0.0.1:3
    cache_mode: none
""")
    for cmd in ("run", "plan"):
        assert main([cmd, "--topology", str(topo), "--app-server", "shared0"]) == 0
        assert f"cache_mode shared — one memcached ({shared}) holds the whole 16 MB budget" in capsys.readouterr().out
        assert main([cmd, "--topology", str(topo), "--app-server", "none0"]) == 0
        assert "cache_mode none — it has no cache" in capsys.readouterr().out
    assert main(["status", "--topology", str(topo), "--app-server", "shared0"]) == 0
    out = capsys.readouterr().out
    assert "shared" in out and shared in out and "16.0" in out


def test_run_fails_clearly_on_an_unreachable_partition_and_waits_with_wait(procs, free_address,
                                                                          tmp_path: Path) -> None:
    late = free_address()
    _, a = procs.memcached(16)
    topo = _write(tmp_path, {"a": a, "b": late}, controller="{policy: static, min_partition_mb: 16, interval: 100ms}",
                  budget=32)
    r = _run("run", "--topology", topo, "--app-server", "app0", "--max-ticks", "1")
    assert r.returncode == 1
    assert f"partition b ({late})" in r.stderr and "run with --wait" in r.stderr
    ctl = procs.start([*CLI, "run", "--topology", topo, "--app-server", "app0", "--wait", "--max-ticks", "2"],
                      name="controller")
    procs.wait_log(ctl, "event=waiting partition=b")
    port = late.rpartition(":")[2]
    mc = procs.memcached(16)[0]  # same binary and flags, different port: reuse its args
    procs.start([*mc.args[:4], port, *mc.args[5:]], name="memcached-late")
    assert ctl.wait(timeout=30) == 0, procs.log(ctl)
    assert "event=tick tick=2" in procs.log(ctl)


def test_run_refuses_a_preallocated_instance(procs, tmp_path: Path) -> None:
    _, a = procs.memcached(48, extra=["-L"])
    _, b = procs.memcached(48)
    topo = _write(tmp_path, {"a": a, "b": b}, budget=96)
    r = _run("run", "--topology", topo, "--app-server", "app0")
    assert r.returncode == 1 and "preallocated its memory (-L)" in r.stderr
    assert stats(b, "settings")["slab_automove"] is True  # refused before b was touched


def test_run_dry_run_logs_ticks_and_changes_nothing(procs, tmp_path: Path) -> None:
    addrs = {n: procs.memcached(32)[1] for n in "ab"}
    topo = _write(tmp_path, addrs, controller="{policy: static, min_partition_mb: 16, interval: 100ms}")
    text = topo.read_text().replace("a: 127", "a: {addr: 127").replace(f"{addrs['a']},", f"{addrs['a']}, initial_mb: 48}},")
    topo.write_text(text)
    tl = tmp_path / "t.jsonl"
    r = _run("run", "--topology", topo, "--app-server", "app0", "--dry-run", "--max-ticks", "3", "--timeline", tl)
    assert r.returncode == 0, r.stderr
    ticks = [ln for ln in r.stderr.splitlines() if "event=tick " in ln]
    assert len(ticks) == 3 and "planned_mb=a:48,b:16" in ticks[0]
    assert "event=left" not in r.stderr  # it took nothing over, so it left nothing
    assert (limit_mb(addrs["a"]), limit_mb(addrs["b"])) == (32, 32)
    recs = [json.loads(x) for x in tl.read_text().splitlines()]
    assert [x["dry_run"] for x in recs] == [True, True, True]


def test_status_of_a_redis_with_a_password(procs, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _, r = procs.redis(16, extra=["--requirepass", "s3cret"])
    (tmp_path / "redis-pw").write_text("s3cret\n")
    topo = _write(tmp_path, {"a": f'{{redis: "{r}", password_file: redis-pw}}'}, budget=32)
    assert main(["status", "--topology", str(topo), "--app-server", "app0"]) == 0
    row = next(ln.split() for ln in capsys.readouterr().out.splitlines() if ln.startswith("a "))
    assert row[1] == r and row[2] == "16.0"
    # The wrong password: the partition is reported, and the password is not shown.
    (tmp_path / "redis-pw").write_text("pw-X7q\n")
    assert main(["status", "--topology", str(topo), "--app-server", "app0"]) == 1
    out = capsys.readouterr()
    assert "pw-X7q" not in out.out + out.err and "s3cret" not in out.out + out.err


@pytest.mark.parametrize("args", [["policies"], ["policies", "--json"]])
def test_a_list_read_by_a_reader_that_goes_away_ends_without_a_traceback(args: list[str]) -> None:
    # `robinhood-controller policies | head`: the reader closes the pipe before the
    # command writes; the command stops with status 141 (128 + SIGPIPE) and says nothing.
    code = f"import sys; from robinhood_controller.cli import main; sys.exit(main({args!r}))"
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert p.stdout is not None and p.stderr is not None
    p.stdout.close()
    err = p.stderr.read().decode()
    assert p.wait(timeout=60) == 141, err
    assert "Traceback" not in err and "BrokenPipe" not in err, err


def test_log_levels_are_the_go_components_words(capsys: pytest.CaptureFixture[str]) -> None:
    from robinhood_common.logs import LEVELS, parse_level

    assert LEVELS == ("debug", "info", "warn", "error")
    assert parse_level("warn") == parse_level("WARNING") == 30 and parse_level("Debug") == 10
    with pytest.raises(ValueError, match="'loud' is not one of debug, info, warn, error"):
        parse_level("loud")
    with pytest.raises(SystemExit) as e:
        main(["plan", "--topology", "x.yaml", "--id", "app0", "--log-level", "loud"])
    assert e.value.code == 2 and "'loud' is not one of debug, info, warn, error" in capsys.readouterr().err


def test_plan_says_what_run_takes_over_and_run_says_what_it_left(procs, tmp_path: Path) -> None:
    # memcached's own page mover is on by default (slab_automove=1).
    addrs = {n: procs.memcached(32)[1] for n in "ab"}
    assert all(int(stats(a, "settings")["slab_automove"]) == 1 for a in addrs.values())
    topo = _write(tmp_path, addrs, controller="{policy: static, min_partition_mb: 16, interval: 100ms}")
    r = _run("plan", "--topology", topo, "--app-server", "app0")
    assert r.returncode == 0, r.stderr
    for n in "ab":
        assert (f"note: on {n}, run turns memcached's slab automover off (slab_automove=1 -> 0): the controller "
                "moves pages itself; it stays so after run exits unless run has --restore-settings") in r.stdout
    assert all(int(stats(a, "settings")["slab_automove"]) == 1 for a in addrs.values())  # plan changed nothing
    # run turns it off and says at exit that it left it off ...
    r = _run("run", "--topology", topo, "--app-server", "app0", "--max-ticks", "2")
    assert r.returncode == 0, r.stderr
    assert r.stderr.count("event=left partition=") == 2 and "took_over=slab_automove=1" in r.stderr
    assert all(int(stats(a, "settings")["slab_automove"]) == 0 for a in addrs.values())
    # ... and with --restore-settings puts back what it found.
    for a in addrs.values():
        c = mcdata.client(a)
        try:
            assert c.raw_command("slabs automove 1", b"\r\n") == b"OK"
        finally:
            c.close()
    r = _run("run", "--topology", topo, "--app-server", "app0", "--max-ticks", "2", "--restore-settings")
    assert r.returncode == 0, r.stderr
    assert r.stderr.count("event=restored partition=") == 2 and "event=left" not in r.stderr
    assert all(int(stats(a, "settings")["slab_automove"]) == 1 for a in addrs.values())


def test_a_timeline_on_a_full_disk_costs_the_timeline_only(procs, tmp_path: Path) -> None:
    # /dev/full answers every write with ENOSPC, as a full disk does.
    addrs = {"a": procs.memcached(32)[1]}
    topo = _write(tmp_path, addrs, controller="{policy: static, min_partition_mb: 16, interval: 100ms}")
    r = _run("run", "--topology", topo, "--app-server", "app0", "--max-ticks", "3", "--timeline", "/dev/full")
    assert "Traceback" not in r.stderr, r.stderr
    assert r.stderr.count("event=tick ") == 3 and "event=tick_error" not in r.stderr  # the loop went on
    assert r.stderr.count("event=error kind=timeline path=/dev/full msg='No space left on device' (the control") == 1
    assert r.returncode == 1 and "event=timeline_incomplete path=/dev/full" in r.stderr


def test_plan_and_status_say_what_floor_the_workload_needs(procs, tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    _, a = procs.memcached(32)
    c = mcdata.client(a)
    for i in range(25):  # items of 25 sizes: a page in each of ~22 slab classes, which memcached keeps
        c.set(f"s{i}", b"z" * int(100 * 1.25**i), noreply=False)
    n = sum(1 for k in stats(a, "slabs") if k.endswith(":total_pages"))  # classes in use (some sizes share one)
    assert n >= 20
    topo = _write(tmp_path, {"a": a}, controller="{min_partition_mb: 8, interval: 1m}")
    for cmd in ("plan", "status"):
        assert main([cmd, "--topology", str(topo), "--app-server", "app0"]) == 0
        out = capsys.readouterr().out
        assert (f"note: partition a holds pages in {n} slab classes and memcached keeps one 1 MB page in each, "
                f"so it cannot shrink below {n} MB; min_partition_mb is 8") in out, out
        assert f"raise min_partition_mb to at least {n}" in out
        assert main([cmd, "--topology", str(topo), "--app-server", "app0", "--json"]) == 0
        doc = json.loads(capsys.readouterr().out)
        assert doc["partitions"][0]["floor_bytes"] == n << 20
        assert any(f"cannot shrink below {n} MB" in note for note in doc["notes"])
    # With a floor at or above what the workload needs, nothing is said.
    topo = _write(tmp_path, {"a": a}, controller=f"{{min_partition_mb: {n}, interval: 1m}}")
    assert main(["status", "--topology", str(topo), "--app-server", "app0"]) == 0
    assert "slab classes" not in capsys.readouterr().out
