"""`robinhood-controller policy-server`: the simulator's controller. The real
subcommand runs as a subprocess and is spoken to in JSON lines; the decision it makes
is the one Controller.tick makes (decide.decide), checked side by side at the end."""
from __future__ import annotations

import dataclasses
import json
import re
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from robinhood.v1 import policy_pb2 as pb

from robinhood_controller.config import load
from robinhood_controller.controller import Controller
from robinhood_controller.partition import PartitionStats
from robinhood_controller.plan import MIB
from robinhood_controller.policies import AllocationPolicy, Decision, PartitionSample, PlanInput
from robinhood_controller.policy_server import OPS, REQUESTS, REQUIRED, PolicyServer
from robinhood_controller.rbc import QueryStats, RBCSnapshot
from robinhood_controller.timeline import read_timeline

NAMES = ("catalog", "ratings", "recs")
T0 = 1_000_000_000.0
_SCRIPT = Path(sys.executable).parent / "robinhood-controller"
SERVER = [str(_SCRIPT)] if _SCRIPT.exists() else [sys.executable, "-m", "robinhood_controller.cli"]
SERVER = [*SERVER, "policy-server"]
VECTORS = Path(__file__).resolve().parents[2] / "tests" / "vectors"
PROTO = Path(__file__).resolve().parents[2] / "proto" / "robinhood" / "v1"

TIMELINE_FIELDS = {"time", "tick", "app_server", "policy", "dry_run", "budget_bytes", "rbc_ok", "window_requests",
                   "pages_moved", "partitions"}
TIMELINE_PARTITION_FIELDS = {"up", "target_bytes", "planned_limit_bytes", "limit_bytes", "malloced_bytes",
                             "used_bytes", "item_bytes", "rbc", "eligible", "pages_moved", "hit_ratio"}


def _topology(tmp_path: Path) -> Path:
    """app0: robinhood, 96 MB over three partitions; app1: static with catalog at 48 MB;
    shared0: a shared cache. The RBC address is never dialled."""
    backends = "\n".join(f"  - {{id: {i}, name: {n}, type: kv, replicas: [{{grpc: 127.0.0.1:1}}]}}"
                         for i, n in enumerate(NAMES))
    p = tmp_path / "topology.yaml"
    p.write_text(f"""
rbc_server: {{grpc: 127.0.0.1:1, window: 10s}}
backends:
{backends}
app_servers:
  - id: app0
    http: 127.0.0.1:2
    cache_mode: partitioned
    cache_budget_mb: 96
    partitions: {{catalog: 127.0.0.1:3, ratings: 127.0.0.1:4, recs: 127.0.0.1:5}}
    controller: {{policy: robinhood, min_partition_mb: 16, interval: 1s}}
  - id: app1
    http: 127.0.0.1:6
    cache_mode: partitioned
    cache_budget_mb: 96
    partitions: {{catalog: {{addr: 127.0.0.1:7, initial_mb: 48}}, ratings: 127.0.0.1:8, recs: 127.0.0.1:9}}
    controller: {{policy: static, min_partition_mb: 16, interval: 2s}}
  - id: shared0
    http: 127.0.0.1:10
    cache_mode: shared
    cache_budget_mb: 16
    shared_cache: 127.0.0.1:11
""")
    return p


def _partitions(limits_mb: Mapping[str, int], skip: tuple[str, ...] = ()) -> dict[str, Any]:
    """Full caches at the given limits (every partition eligible)."""
    return {n: {"limit_bytes": mb * MIB, "malloced_bytes": mb * MIB, "item_bytes": mb * MIB * 9 // 10,
                "items": 1000, "evictions": 5, "get_hits": 70, "get_misses": 30, "hit_ratio": 0.7}
            for n, mb in limits_mb.items() if n not in skip}


def _rbc(blamed: str | None = "ratings") -> dict[str, Any]:
    return {"counts": {blamed: 5} if blamed else {}, "window_requests": 1000, "band_requests": 10,
            "p99_latency_us": 300_000}


def _tick(app: str, now: float, limits_mb: Mapping[str, int], rbc: dict[str, Any] | None = None,
          skip: tuple[str, ...] = ()) -> dict[str, Any]:
    return {"op": "tick", "app_server": app, "now": now, "partitions": _partitions(limits_mb, skip), "rbc": rbc,
            "stats": {n: {"hits": 7, "misses": 3, "queries": 10} for n in limits_mb},
            "local": {n: {"hits": 7, "misses": 3, "queries": 10} for n in limits_mb}}


class Server:
    """The policy-server subprocess, asked one line at a time."""

    def __init__(self, cwd: Path | None = None) -> None:
        self.p = subprocess.Popen(SERVER, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  text=True, cwd=cwd)

    def send(self, line: str) -> dict[str, Any]:
        return json.loads(self.send_line(line))

    def send_line(self, line: str) -> str:
        """The answer line to a request line, as written."""
        assert self.p.stdin is not None and self.p.stdout is not None
        self.p.stdin.write(line + "\n")
        self.p.stdin.flush()
        answer = self.p.stdout.readline()
        assert answer.endswith("\n"), f"no answer to {line!r}; stderr: {self._stderr()}"
        return answer

    def ask(self, req: dict[str, Any]) -> dict[str, Any]:
        return self.send(json.dumps(req))

    def finish(self, close: bool = True) -> tuple[int, str, str]:
        """Close (or just end stdin); exit status, the rest of stdout, stderr."""
        if close:
            assert self.ask({"op": "close"}) == {"ok": True}
        out, err = self.p.communicate(timeout=30)
        return self.p.returncode, out, err

    def _stderr(self) -> str:
        self.p.kill()
        return self.p.communicate(timeout=10)[1]


@pytest.fixture
def server() -> Any:
    s = Server()
    yield s
    if s.p.poll() is None:
        s.p.kill()
        s.p.communicate(timeout=10)


def test_robinhood_moves_space_towards_the_blocking_partition(server: Server, tmp_path: Path) -> None:
    topo = _topology(tmp_path)
    tl = tmp_path / "controller-app0.jsonl"
    opened = server.ask({"op": "open", "topology": str(topo), "app_server": "app0", "timeline": str(tl)})
    assert opened == {
        "ok": True, "app_server": "app0", "policy": "robinhood", "needs_rbc": True, "budget_bytes": 96 * MIB,
        "floor_bytes": 16 * MIB, "interval_s": 1.0,
        "partitions": [{"name": "catalog", "backend_id": 0, "initial_mb": 32},
                       {"name": "ratings", "backend_id": 1, "initial_mb": 32},
                       {"name": "recs", "backend_id": 2, "initial_mb": 32}],
        "budget_mb": 96, "rbc_window_s": 10.0,
    }
    limits = {n: 32 for n in NAMES}
    answers = []
    for i in range(30):
        a = server.ask(_tick("app0", T0 + i, limits, _rbc("ratings")))
        assert a["ok"] is True and a["tick"] == i + 1, a
        assert list(a) == ["ok", "tick", "targets", "limits_mb", "eligible", "notes"]
        assert sum(a["targets"].values()) == 96 * MIB
        assert min(a["targets"].values()) >= 16 * MIB
        assert sum(a["limits_mb"].values()) == 96
        assert a["eligible"] == {n: True for n in NAMES}
        limits = a["limits_mb"]  # the simulator applies them at once
        answers.append(a)
    assert answers[0]["notes"] == ["adopted catalog:32MB ratings:32MB recs:32MB"]
    assert all(a["notes"] == [] for a in answers[1:])
    t = answers[-1]["targets"]
    assert t["ratings"] > 45 * MIB and t["catalog"] == t["recs"] < 25 * MIB
    assert limits["ratings"] > 45 and limits["catalog"] < 25

    # No RBC snapshot: robinhood keeps its targets.
    a = server.ask(_tick("app0", T0 + 30, limits, None))
    assert a["targets"] == t and a["limits_mb"] == limits and a["notes"] == ["rbc unavailable: targets kept"]
    # recs does not answer: its target is frozen, the others are planned.
    a = server.ask(_tick("app0", T0 + 31, limits, _rbc("ratings"), skip=("recs",)))
    assert a["targets"]["recs"] == t["recs"] and a["targets"]["ratings"] > t["ratings"]
    assert set(a["eligible"]) == {"catalog", "ratings"} and sum(a["targets"].values()) == 96 * MIB
    code, rest, err = server.finish()
    assert code == 0 and rest == ""
    assert "event=open app_server=app0 policy=robinhood" in err

    recs = read_timeline(tl)
    assert [r["tick"] for r in recs] == list(range(1, 33))
    for r in recs:
        assert set(r) - {"notes"} == TIMELINE_FIELDS
        assert set(r["partitions"]) == set(NAMES)
        assert all(set(p) == TIMELINE_PARTITION_FIELDS for p in r["partitions"].values())
    # A tick's notes are in its line when it has any, as in the answer.
    assert [(r["tick"], r["notes"]) for r in recs if "notes" in r] == [
        (1, answers[0]["notes"]), (31, ["rbc unavailable: targets kept"])]
    first = recs[0]
    assert first["time"] == T0 and first["app_server"] == "app0" and first["policy"] == "robinhood"
    assert first["dry_run"] is False and first["budget_bytes"] == 96 * MIB and first["pages_moved"] == 0
    assert first["rbc_ok"] is True and first["window_requests"] == 1000
    p = first["partitions"]["ratings"]
    assert p["up"] is True and p["rbc"] == 5 and p["eligible"] is True and p["hit_ratio"] == 0.7
    assert p["target_bytes"] == answers[0]["targets"]["ratings"]
    assert p["limit_bytes"] == p["planned_limit_bytes"] == answers[0]["limits_mb"]["ratings"] * MIB
    assert p["malloced_bytes"] == p["used_bytes"] == 32 * MIB and p["item_bytes"] == 32 * MIB * 9 // 10
    assert recs[30]["rbc_ok"] is False and recs[30]["partitions"]["catalog"]["rbc"] is None
    down = recs[31]["partitions"]["recs"]
    assert down["up"] is False and down["limit_bytes"] is None and down["target_bytes"] == t["recs"]


def test_static_keeps_the_configured_allocation(server: Server, tmp_path: Path) -> None:
    topo = _topology(tmp_path)
    a = server.ask({"op": "open", "topology": str(topo), "app_server": "app1", "timeline": None})
    assert a["policy"] == "static" and a["needs_rbc"] is False and a["interval_s"] == 2.0
    assert [p["initial_mb"] for p in a["partitions"]] == [48, 24, 24]
    limits = {n: 32 for n in NAMES}
    for i, rbc in enumerate([_rbc("ratings"), None, _rbc("recs"), None]):
        a = server.ask(_tick("app1", T0 + 2 * i, limits, rbc))
        assert a["targets"] == {"catalog": 48 * MIB, "ratings": 24 * MIB, "recs": 24 * MIB}
        assert a["limits_mb"] == {"catalog": 48, "ratings": 24, "recs": 24}
        assert a["eligible"] == {}
        limits = a["limits_mb"]
    assert server.finish()[0] == 0


def test_a_first_tick_without_every_partition_waits(server: Server, tmp_path: Path) -> None:
    server.ask({"op": "open", "topology": str(_topology(tmp_path)), "app_server": "app0"})
    limits = {n: 32 for n in NAMES}
    a = server.ask(_tick("app0", T0, limits, _rbc(), skip=("catalog",)))
    assert a == {"ok": True, "tick": 1, "targets": {}, "limits_mb": {}, "eligible": {},
                 "notes": ["waiting for every partition to answer before adopting targets"]}
    a = server.ask(_tick("app0", T0 + 1, limits, _rbc()))
    assert a["tick"] == 2 and a["notes"][0].startswith("adopted ")


def test_bad_requests_answer_an_error_and_change_nothing(server: Server, tmp_path: Path) -> None:
    topo = _topology(tmp_path)
    limits = {n: 32 for n in NAMES}

    def error(req: dict[str, Any] | str) -> str:
        a = server.send(req) if isinstance(req, str) else server.ask(req)
        assert a["ok"] is False and set(a) == {"ok", "error"}, a
        return a["error"]

    assert error("{not json").startswith("request: not JSON")
    assert error("[" * 200_000 + "]" * 200_000) == "request: nested too deep to be a request"
    assert error('{"op": "tick", "x": [' + "0," * 2_500_000 + '0]}') == "request: longer than 4194304 bytes"
    assert error('{"op": "fly"}') == 'op: "fly" is not one of open, tick, close'  # the next line is read whole
    assert error("[1, 2]") == "request: a list is not an object"
    assert error({"app_server": "app0"}) == "op: missing"
    assert error({"op": "fly"}) == 'op: "fly" is not one of open, tick, close'
    assert "not open" in error(_tick("app0", T0, limits, _rbc()))  # a tick before open
    assert error({"op": "open", "topology": str(topo)}) == "app_server: missing"
    assert "cannot read" in error({"op": "open", "topology": str(tmp_path / "none.yaml"), "app_server": "app0"})
    e = error({"op": "open", "topology": str(topo), "app_server": "app7"})
    assert "app_server: 'app7' is not in app_servers (known: app0, app1, shared0)" in e
    e = error({"op": "open", "topology": str(topo), "app_server": "shared0"})
    assert e.startswith("app_server: shared0 has cache_mode shared")
    assert error({"op": "open", "topology": str(topo), "app_server": "app0", "timeline": 3}).startswith("timeline: ")
    assert error({"op": "open", "topology": str(topo), "app_server": "app0", "extra": 1}).startswith("extra: unknown")

    assert server.ask({"op": "open", "topology": str(topo), "app_server": "app0"})["ok"] is True
    e = error({"op": "open", "topology": str(topo), "app_server": "app0"})
    assert e == 'app_server: "app0" is already open'
    assert error({**_tick("app0", T0, limits, _rbc()), "now": "soon"}) == 'now: "soon" is not a number'
    bad = _tick("app0", T0, limits, _rbc())
    bad["partitions"]["catalog"]["limit_bytes"] = "lots"
    assert error(bad) == 'partitions.catalog.limit_bytes: "lots" is not an integer'
    bad = _tick("app0", T0, limits, _rbc())
    del bad["partitions"]["recs"]["malloced_bytes"]
    assert error(bad) == "partitions.recs.malloced_bytes: missing"
    bad = _tick("app0", T0, limits, {**_rbc(), "counts": {"ratings": -1}})
    assert error(bad) == "rbc.counts.ratings: -1 is negative"
    bad = _tick("app0", T0, limits, _rbc())
    bad["partitions"]["nope"] = bad["partitions"]["catalog"]
    assert error(bad).startswith("partitions.nope: not a partition of this app server")
    bad = _tick("app0", T0, limits, _rbc())
    bad["stats"]["catalog"]["hitz"] = 1
    assert error(bad).startswith("stats.catalog.hitz: unknown field")
    assert error({**_tick("app0", T0, limits, _rbc()), "partitions": []}) == "partitions: a list is not an object"
    assert "app9" in error(_tick("app9", T0, limits, _rbc()))  # an unknown app server
    bad = _tick("app0", T0, limits, {**_rbc(), "counts": None})
    assert error(bad) == "rbc.counts: missing"
    bad = _tick("app0", T0, limits, {**_rbc(), "p99_latency_us": 2**32})
    assert error(bad) == "rbc.p99_latency_us: 4294967296 is out of range"
    bad = _tick("app0", T0, limits, {**_rbc(), "p999": 1})
    assert error(bad).startswith("rbc.p999: unknown field (known: counts, window_requests, band_requests, ")
    bad = _tick("app0", T0, limits, _rbc())
    bad["partitions"]["catalog"]["items"] = 1.5
    assert error(bad) == "partitions.catalog.items: 1.5 is not an integer"
    bad["partitions"]["catalog"]["items"] = "12x"
    assert error(bad) == 'partitions.catalog.items: "12x" is not an integer'
    bad = _tick("app0", T0, limits, _rbc())
    bad["partitions"]["catalog"]["hit_ratio"] = 1.5
    assert error(bad) == "partitions.catalog.hit_ratio: 1.5 is not between 0 and 1"
    bad = _tick("app0", T0, limits, _rbc())
    bad["stats"]["catalog"] = [1]
    assert error(bad) == "stats.catalog: a list is not an object"

    # Nothing changed: the next good tick is the first, and adopts.
    server.p.stdin.write("\n")  # a blank line is not a request
    a = server.ask(_tick("app0", T0, limits, _rbc()))
    assert a["ok"] is True and a["tick"] == 1 and a["notes"][0].startswith("adopted ")
    assert error({"op": "close", "now": 1}).startswith("now: unknown field")
    code, rest, err = server.finish()
    assert code == 0 and rest == ""
    assert "event=bad_request" in err and "Traceback" not in err  # a bad request is a line, not a traceback


def test_two_app_servers_in_one_process(server: Server, tmp_path: Path) -> None:
    topo = _topology(tmp_path)
    tl0, tl1 = tmp_path / "controller-app0.jsonl", tmp_path / "controller-app1.jsonl"
    assert server.ask({"op": "open", "topology": str(topo), "app_server": "app0", "timeline": str(tl0)})["ok"]
    assert server.ask({"op": "open", "topology": str(topo), "app_server": "app1", "timeline": str(tl1)})["ok"]
    l0 = l1 = {n: 32 for n in NAMES}
    for i in range(4):
        a0 = server.ask(_tick("app0", T0 + i, l0, _rbc("recs")))
        assert a0["tick"] == i + 1
        l0 = a0["limits_mb"]
        if i % 2 == 0:  # app1 ticks every other second (interval 2s)
            a1 = server.ask(_tick("app1", T0 + i, l1, _rbc("recs")))
            assert a1["tick"] == i // 2 + 1
            l1 = a1["limits_mb"]
    assert a0["targets"]["recs"] > 32 * MIB and l1 == {"catalog": 48, "ratings": 24, "recs": 24}
    code, _, _ = server.finish(close=False)  # end of stdin closes too
    assert code == 0
    assert [r["policy"] for r in read_timeline(tl0)] == ["robinhood"] * 4
    assert [(r["policy"], r["time"]) for r in read_timeline(tl1)] == [("static", T0), ("static", T0 + 2)]


def test_same_input_gives_the_same_output(tmp_path: Path) -> None:
    topo = _topology(tmp_path)

    def lines(timeline: Path) -> str:
        reqs: list[Any] = [{"op": "open", "topology": str(topo), "app_server": "app0", "timeline": str(timeline)},
                           {"op": "open", "topology": str(topo), "app_server": "app1"}]
        limits = {"catalog": 40, "ratings": 30, "recs": 26}
        for i in range(20):
            reqs.append(_tick("app0", T0 + i * 0.5, limits, _rbc(NAMES[i % 3]), skip=("recs",) if i == 7 else ()))
            reqs.append(_tick("app1", T0 + i * 0.5, limits, None))
            reqs.append({"op": "tick", "app_server": "app0", "now": "bad"})
            limits = {"catalog": 40 - i % 3, "ratings": 30 + i % 3, "recs": 26}
        return "".join(json.dumps(r) + "\n" for r in reqs) + '{"op":"close"}\n'

    outs = []
    for k in range(2):
        tl = tmp_path / f"t{k}.jsonl"
        r = subprocess.run(SERVER, input=lines(tl).encode(), capture_output=True, timeout=60)
        assert r.returncode == 0, r.stderr
        outs.append((r.stdout, tl.read_bytes()))
    assert outs[0] == outs[1]
    answers = [json.loads(x) for x in outs[0][0].splitlines()]
    assert len(answers) == 2 + 3 * 20 + 1
    assert sum(not a["ok"] for a in answers) == 20


def test_hit_ratio_absent_or_null_is_none(tmp_path: Path) -> None:
    """A partition's hit_ratio (proto3 optional) is the timeline's when given; absent
    and null alike are none."""
    srv = PolicyServer()
    tl = tmp_path / "controller-app0.jsonl"
    assert srv.handle(json.dumps({"op": "open", "topology": str(_topology(tmp_path)), "app_server": "app0",
                                  "timeline": str(tl)}))["ok"]
    req = _tick("app0", T0, {n: 32 for n in NAMES}, _rbc())
    del req["partitions"]["catalog"]["hit_ratio"]
    req["partitions"]["ratings"]["hit_ratio"] = None
    assert srv.handle(json.dumps(req))["ok"] is True
    srv.close()
    parts = read_timeline(tl)[0]["partitions"]
    assert {n: p["hit_ratio"] for n, p in parts.items()} == {"catalog": None, "ratings": None, "recs": 0.7}


def test_the_protocol_is_policy_proto() -> None:
    """The server reads and writes the messages of proto/robinhood/v1/policy.proto: the
    fields it requires are fields of them, and the controller's own types carry the
    fields of the messages they are read from."""
    assert OPS == ("open", "tick", "close")
    assert [c.DESCRIPTOR.name for c in REQUESTS.values()] == ["PolicyOpenRequest", "PolicyTickRequest",
                                                              "PolicyCloseRequest"]
    messages = pb.DESCRIPTOR.message_types_by_name
    for name, required in REQUIRED.items():
        assert required and set(required) <= set(messages[name].fields_by_name), name
    # The fields REQUIRED lists are the ones whose comment in policy.proto says "Required.".
    marked: dict[str, list[str]] = {}
    message, comment = "", ""
    for line in (PROTO / "policy.proto").read_text().splitlines():
        if m := re.match(r"message (\w+) \{", line):
            message, comment = m[1], ""
        elif m := re.match(r"\s*//(.*)", line):
            comment += m[1]
        elif m := re.match(r"\s+(?:optional |repeated )?[\w.<>, ]+ (\w+) = \d+;", line):
            if "Required." in comment:
                marked.setdefault(message, []).append(m[1])
            comment = ""
    assert marked == {k: list(v) for k, v in REQUIRED.items()}
    assert all("op" in REQUIRED[c.DESCRIPTOR.name] for c in REQUESTS.values())
    assert [f.name for f in dataclasses.fields(QueryStats)] == list(pb.PolicyQueryStats.DESCRIPTOR.fields_by_name)
    assert [f.name for f in dataclasses.fields(PartitionSample)] == [
        n for n in pb.PolicyPartitionSample.DESCRIPTOR.fields_by_name if n != "hit_ratio"]


def _vector() -> list[dict[str, Any]]:
    doc = json.loads((VECTORS / "policy_server.json").read_text())
    assert doc["schema"] == "robinhood-policy-server/v1"
    return doc["exchange"]


def _line(obj: Any) -> str:
    return json.dumps(obj, separators=(",", ":"))


def _quoted(v: Any) -> Any:
    """Every integer as its decimal string (how the proto3 JSON mapping writes 64-bit
    integers by default, e.g. Go's protojson)."""
    if isinstance(v, dict):
        return {k: _quoted(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_quoted(x) for x in v]
    return str(v) if isinstance(v, int) and not isinstance(v, bool) else v


@pytest.mark.parametrize("quote", [False, True], ids=["as-written", "integers-quoted"])
def test_the_shared_vectors(quote: bool) -> None:
    """tests/vectors/policy_server.json (the simulator's Go side runs it too): the real
    server, run in that folder, answers every request of the exchange exactly, byte for
    byte; the same with every integer of the requests quoted."""
    exchange = _vector()
    assert {e["request"]["op"] for e in exchange} == set(OPS) and any(not e["answer"]["ok"] for e in exchange)
    s = Server(cwd=VECTORS)
    try:
        for e in exchange:
            req = _quoted(e["request"]) if quote else e["request"]
            assert s.send_line(_line(req)) == _line(e["answer"]) + "\n", req
        code, rest, err = s.finish(close=False)
    finally:
        if s.p.poll() is None:
            s.p.kill()
            s.p.communicate(timeout=10)
    assert code == 0 and rest == "", err


class _Broken(AllocationPolicy):
    """A policy that fails: raises, or answers targets that do not keep the sum."""

    name = "broken"
    summary = "fails"

    def plan(self, inp: PlanInput) -> Decision:
        if inp.rbc.get("ratings"):
            raise RuntimeError("boom")
        return Decision(targets={n: t + 1 for n, t in inp.targets.items()}, moved=True)


def test_a_failing_policy_keeps_the_targets(tmp_path: Path) -> None:
    srv = PolicyServer()
    topo = _topology(tmp_path)
    assert srv.handle(json.dumps({"op": "open", "topology": str(topo), "app_server": "app0"}))["ok"]
    app = srv.apps["app0"]
    app.policy = _Broken(app.policy.params, app.policy.ctx)
    limits = {n: 32 for n in NAMES}
    a = srv.handle(json.dumps(_tick("app0", T0, limits, _rbc("ratings"))))
    assert a["ok"] is True and a["targets"] == {n: 32 * MIB for n in NAMES}
    assert a["notes"][1] == "policy failed: RuntimeError: boom; targets kept"
    a = srv.handle(json.dumps(_tick("app0", T0 + 1, limits, _rbc(None))))
    assert a["targets"] == {n: 32 * MIB for n in NAMES}
    assert a["notes"] == [f"policy failed: targets sum to {96 * MIB + 3} bytes, not {96 * MIB}; targets kept"]
    srv.close()


class _FakeRBC:
    """Stands in for the RBC client of a Controller: the snapshot it is given."""

    def __init__(self) -> None:
        self.snap: RBCSnapshot | None = None

    def fetch(self, _names_by_id: Mapping[int, str]) -> RBCSnapshot:
        assert self.snap is not None
        return self.snap

    def close(self) -> None:
        pass


def test_the_controller_and_the_server_decide_alike(tmp_path: Path) -> None:
    """Controller.tick (read-only, its readings replaced) and the policy server are
    given the same readings and answer the same targets, limits and timeline line."""
    topo = _topology(tmp_path)
    ctl = Controller(load(topo, "app0"), read_only=True)
    assert ctl.rbc is not None
    ctl.rbc.close()
    rbc = _FakeRBC()
    ctl.rbc = rbc  # type: ignore[assignment]
    readings: dict[str, PartitionStats | None] = {}
    ctl.observe = lambda: dict(readings)  # type: ignore[method-assign]
    srv = PolicyServer()
    assert srv.handle(json.dumps({"op": "open", "topology": str(topo), "app_server": "app0"}))["ok"]
    limits = {"catalog": 40, "ratings": 30, "recs": 26}
    try:
        for i in range(12):
            req = _tick("app0", T0 + i, limits, _rbc(NAMES[i % 3]), skip=("catalog",) if i == 5 else ())
            parts = req["partitions"]
            readings.clear()
            readings.update({n: PartitionStats(**{k: v for k, v in parts[n].items() if k != "hit_ratio"},
                                               pid=1, uptime=10, reassign_running=False) if n in parts else None
                             for n in NAMES})
            rbc.snap = RBCSnapshot(counts={n: req["rbc"]["counts"].get(n, 0) for n in NAMES}, window_requests=1000,
                                   band_requests=10, p99_latency_us=300_000,
                                   stats={n: QueryStats(**s) for n, s in req["stats"].items()},
                                   local={n: QueryStats(**s) for n, s in req["local"].items()})
            r = ctl.tick()
            a = srv.handle(json.dumps(req))
            assert (a["targets"], a["limits_mb"], a["eligible"], a["notes"]) == (
                r.targets, r.limits_planned, r.eligible, r.notes)
            mine = ctl.timeline_record(r)
            assert set(mine) - {"notes"} == TIMELINE_FIELDS and mine.get("notes", []) == r.notes
            assert all(set(p) == TIMELINE_PARTITION_FIELDS for p in mine["partitions"].values())
            limits = a["limits_mb"]
    finally:
        ctl.close()
        srv.close()


def test_one_topology_file_is_validated_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Opening every app server of one file validates it once (at the paper's scale
    validation costs seconds an app server); a changed file is validated again."""
    from robinhood_common import topology as topo_mod
    calls = []
    real = topo_mod.from_document

    def counting(doc: Any) -> Any:
        calls.append(1)
        return real(doc)

    monkeypatch.setattr(topo_mod, "from_document", counting)
    topo = _topology(tmp_path)
    srv = PolicyServer()
    for app in ("app0", "app1"):
        assert srv.handle(json.dumps({"op": "open", "topology": str(topo), "app_server": app}))["ok"]
    assert len(calls) == 1
    topo.write_text(topo.read_text().replace("budget_mb: 96", "budget_mb: 97"))
    srv2_ans = PolicyServer().handle(json.dumps({"op": "open", "topology": str(topo), "app_server": "app0"}))
    assert srv2_ans["ok"] and len(calls) == 2
    assert srv.handle(json.dumps({"op": "open", "topology": str(topo), "app_server": "app2"}))["ok"] is False


def _short_path(name: str) -> Path:
    """A socket path within the 107 bytes AF_UNIX allows (pytest's tmp_path may not be)."""
    import os
    import tempfile

    return Path(tempfile.gettempdir()) / f"rh-ps-{os.getpid()}-{name}.sock"


def _listen(path: Path) -> subprocess.Popen[str]:
    """`policy-server --listen PATH`, once it listens."""
    p = subprocess.Popen([*SERVER, "--listen", str(path)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    assert p.stdout is not None
    line = p.stdout.readline()
    assert line == f"listening {path}\n", (line, p.stderr.read() if p.poll() is not None else "")  # type: ignore[union-attr]
    return p


def _session(path: Path) -> tuple[Any, Any]:
    import socket

    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(60)
    s.connect(str(path))
    return s, s.makefile("rw", encoding="utf-8")


def test_a_listening_server_answers_each_connection_as_a_process_of_its_own(tmp_path: Path) -> None:
    topo = _topology(tmp_path)
    sock = _short_path("sessions")
    p = _listen(sock)
    try:
        a, fa = _session(sock)
        b, fb = _session(sock)  # two sessions at once
        answers = []
        for f in (fa, fb):
            f.write(json.dumps({"op": "open", "topology": str(topo), "app_server": "app0"}) + "\n")
            f.flush()
            answers.append(json.loads(f.readline()))
        assert answers[0] == answers[1] and answers[0]["ok"] and answers[0]["policy"] == "robinhood"
        # one session's state is its own: app1 opened on b only
        fb.write(json.dumps({"op": "open", "topology": str(topo), "app_server": "app1"}) + "\n")
        fb.flush()
        assert json.loads(fb.readline())["ok"]
        fa.write(json.dumps(_tick("app1", T0, {"catalog": 48, "ratings": 24, "recs": 24})) + "\n")
        fa.flush()
        assert "app1" in json.loads(fa.readline())["error"]
        for s, f in ((a, fa), (b, fb)):
            f.write('{"op": "close"}\n')
            f.flush()
            assert json.loads(f.readline()) == {"ok": True}
            assert f.readline() == ""  # the session ends: the connection closes
            s.close()
        # the end of its stdin stops it, and the socket goes with it
        assert p.stdin is not None
        p.stdin.close()
        assert p.wait(timeout=60) == 0 and not sock.exists()
    finally:
        if p.poll() is None:
            p.kill()
            p.wait(timeout=10)
        sock.unlink(missing_ok=True)


def test_a_listening_server_leaves_what_is_not_its_socket(tmp_path: Path) -> None:
    import signal

    taken = tmp_path / "taken"
    taken.write_text("x")
    res = subprocess.run([*SERVER, "--listen", str(taken)], stdin=subprocess.DEVNULL, capture_output=True, text=True,
                         timeout=60)
    assert res.returncode == 2 and f"--listen {taken}: something is there already" in res.stderr
    assert taken.read_text() == "x"
    res = subprocess.run([*SERVER, "--listen", str(tmp_path / "no" / "such")], stdin=subprocess.DEVNULL,
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 2 and "No such file or directory" in res.stderr
    # Its socket replaced by another's (a server started at the same path after this one's
    # was removed): stopping (SIGTERM) does not remove the other's.
    sock = _short_path("replaced")
    p = _listen(sock)
    try:
        sock.unlink()
        sock.write_text("another server's")
        p.send_signal(signal.SIGTERM)
        assert p.wait(timeout=60) == 0 and sock.read_text() == "another server's"
    finally:
        if p.poll() is None:
            p.kill()
            p.wait(timeout=10)
        sock.unlink(missing_ok=True)


def test_the_forking_servers_warm_topology_is_valid() -> None:
    """The topology the forking server reads before it forks (only to warm up) stays
    valid as the schema changes: an invalid one would only cost the warming, silently."""
    import copy

    from robinhood_controller.config import resolve_document
    from robinhood_controller.policy_server import _WARM_TOPOLOGY

    assert resolve_document(copy.deepcopy(_WARM_TOPOLOGY), "app0").policy_params is not None
