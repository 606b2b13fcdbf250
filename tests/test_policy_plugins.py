"""Policies are plug-ins: a new allocation policy and a new dispatch policy, each one new
file in a copy of the repository and no other edit, are listed by the registries and
used from a topology by the app server and the controller, and from an experiment by
the testbed; and in that copy the schema check and the policy, registry and end-to-end
suites pass, the new policies included (docs/architecture.md, "Adding a policy")."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Callable

import pytest
import yaml

from conftest import interrupt, sigint_default, wait_ready_file

REPO = Path(__file__).resolve().parents[1]

DISPATCH_FILE = '''package dispatch

import (
	"math/rand/v2"
	"time"
)

type pinnedParams struct {
	Replica int `json:"replica" range:"[0,1000]" doc:"the replica that serves every batch"`
}

// pinned sends every batch to one configured replica while it is usable,
// else to another at random; a retryable failure is retried once elsewhere.
type pinned struct {
	m   *Machine
	rng *rand.Rand
	i   int
}

func (p *pinned) pick(b *Batch) int {
	if r := p.i % p.m.Replicas(); p.m.Usable(r) && (b == nil || !b.Tried(r)) {
		return r
	}
	return p.m.PickRandom(p.rng, b)
}

func (p *pinned) Arrive(now time.Duration, b *Batch) { p.m.Send(now, b, p.pick(nil), Normal, false) }

func (p *pinned) Done(now time.Duration, b *Batch, c int, st Status) { p.m.Settle(now, b, c, st, p.pick) }

func (p *pinned) Timer(time.Duration, *Batch)       {}
func (p *pinned) Rotation(time.Duration, int, bool) {}

func init() {
	Register("pinned", Factory{
		Summary: "every batch to one configured replica",
		Single:  true,
		Params:  func() any { return &pinnedParams{} },
		New: func(p any, m *Machine, env Env) (Policy, error) {
			return &pinned{m: m, rng: rng(env), i: p.(*pinnedParams).Replica}, nil
		},
	})
}
'''

ALLOCATION_FILE = '''"""Even: move every partition a step towards an even split of the budget."""
from __future__ import annotations

from pydantic import Field
from robinhood_common.split import split_even

from .base import AllocationPolicy, Decision, Params, PlanInput
from .registry import register


class EvenParams(Params):
    step: float = Field(0.5, gt=0, le=1, description="fraction of the distance to the even split moved per tick")


@register
class Even(AllocationPolicy):
    name = "even"
    summary = "move every partition a step towards an even split"
    Params = EvenParams

    def plan(self, inp: PlanInput) -> Decision:
        total = sum(inp.targets.values())
        goal = split_even(total, list(inp.targets))
        step: float = self.params.step  # type: ignore[attr-defined]
        out = {n: t + int((goal[n] - t) * step) for n, t in inp.targets.items()}
        first = sorted(out)[0]
        out[first] += total - sum(out.values())
        return Decision(targets=out, moved=out != dict(inp.targets))
'''


#: A small simulator experiment (two backends, 16 s) for the new allocation policy's arm.
SIM_EXPERIMENT = {
    "name": "tiny-sim", "seed": 3, "duration": "16s",
    "backends": [{"name": "alpha", "type": "kv", "limits": {"workers": 4, "extra_latency_ms": 2}},
                 {"name": "beta", "type": "kv", "limits": {"workers": 4, "extra_latency_ms": 2}}],
    "cache": {"budget_mb": 40},
    "controller": {"interval": "1s", "min_partition_mb": 16},
    "rbc_server": {"window": "4s"},
    "slo": {"latency": "100ms", "step": "2s", "window": "6s", "warmup": "4s"},
    "trace": {"synth": {"rate": 80, "params": {"queries-per-request": 6, "keys": 3000, "mean-size": 4096}}},
}


@pytest.fixture(scope="module")
def copy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the repository with the two new files, its Go binaries built."""
    root = tmp_path_factory.mktemp("repo")
    files = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True).stdout
    for rel in filter(None, files.decode().split("\0")):
        src = REPO / rel
        if src.is_file() and not rel.endswith(".png"):
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, root / rel)
    (root / "lib" / "dispatch" / "pinned.go").write_text(DISPATCH_FILE)
    (root / "controller" / "robinhood_controller" / "policies" / "even.py").write_text(ALLOCATION_FILE)
    # A repository of its own (tools that list the tracked files work there too).
    for cmd in (["git", "init", "-q"], ["git", "add", "-A"]):
        subprocess.run(cmd, cwd=root, check=True, capture_output=True)
    # The binaries scripts/genschema.py asks (the rest are built once, below).
    res = subprocess.run(["go", "build", "-o", str(root / "bin") + "/", "./appserver/cmd/appserver",
                          "./experiment/cmd/tracegen"], cwd=root, capture_output=True, text=True, timeout=900)
    assert res.returncode == 0, res.stderr
    # What `make build` does next: the registries' tables and the policies' declarations
    # every reader checks (exit 10: they changed, so the binaries, which embed them, are
    # built again).
    res = subprocess.run([sys.executable, "scripts/genschema.py", "--registries"], cwd=root, env=env_for(root),
                         capture_output=True, text=True, timeout=600)
    assert res.returncode == 10, f"the new policies' declarations were not written:\n{res.stdout}\n{res.stderr}"
    res = subprocess.run(["go", "build", "-o", str(root / "bin") + "/", "./..."], cwd=root,
                         capture_output=True, text=True, timeout=900)
    assert res.returncode == 0, res.stderr
    return root


def env_for(root: Path) -> dict[str, str]:
    """Run the copy's Python packages and Go binaries."""
    paths = [root / "controller", root / "experiment" / "testbed", root / "lib" / "python"]
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([*map(str, paths), env.get("PYTHONPATH", "")])
    env["ROBINHOOD_BIN"] = str(root / "bin")
    env["ROBINHOOD_CONTROLLER"] = f"{sys.executable} -m robinhood_controller.cli"  # the simulator's policy server
    return env


def in_copy(root: Path, *cmd: str, timeout: float = 600) -> str:
    res = subprocess.run(list(cmd), cwd=root, env=env_for(root), capture_output=True, text=True, timeout=timeout)
    assert res.returncode == 0, f"{' '.join(cmd)} failed in the copy:\n{res.stdout[-4000:]}\n{res.stderr[-4000:]}"
    return res.stdout


def test_the_suites_pass_in_the_copy(copy: Path) -> None:
    """The schema check, the allocation policy suite (its properties run on every
    registered policy), the configuration and dispatch registry suites, and the
    end-to-end runs that take every policy, with nothing edited but the two new files."""
    in_copy(copy, sys.executable, "scripts/genschema.py", "--check")
    assert "| `even` |" in (copy / "docs" / "controller.md").read_text()
    assert "| `pinned` |" in (copy / "docs" / "appserver.md").read_text()
    out = in_copy(copy, sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rA",
                  "controller/tests/test_policies.py", "controller/tests/test_config.py",
                  "controller/tests/test_vectors.py",
                  "experiment/testbed/tests/test_testbed_e2e.py::test_bad_experiment_exits_2_and_starts_nothing",
                  timeout=900)
    assert "test_properties[even]" in out  # the new policy was among those tested
    # The new policy runs an arm in the simulator, through the policy server.
    exp = copy / "tiny-sim.yaml"
    exp.write_text(yaml.safe_dump(SIM_EXPERIMENT))
    in_copy(copy, sys.executable, "-m", "robinhood_testbed.cli", "compare", "--engine", "sim", "--experiment",
            str(exp), "--out", str(copy / "sim-even"), "--policies", "even")
    ticks = [json.loads(ln) for ln in (copy / "sim-even" / "even" / "controller-app0.jsonl").read_text().splitlines()]
    assert len(ticks) >= 10 and all(sum(p["limit_bytes"] for p in t["partitions"].values()) == 40 << 20 for t in ticks)
    out = in_copy(copy, "go", "test", "-count=1", "-v", "./lib/dispatch/", "./tests/e2e/", "-run",
                  "Contract|Params|Describe|TestEveryDispatchPolicy|TestAppserverRejectsBadConfiguration")
    assert "=== RUN   TestEveryPolicyKeepsTheContract/pinned" in out  # the contract test ran the new policy
    assert "pinned:" in out  # and the app server ran it (TestEveryDispatchPolicyThroughTheAppServer's log)
    for schema in (copy / "schema", copy / "lib" / "python" / "robinhood_common" / "schema"):
        text = (schema / "policies.schema.yaml").read_text()
        assert "pinned:" in text and "even:" in text  # both declarations reach every reader


def test_the_registries_list_the_new_policies(copy: Path) -> None:
    out = subprocess.run([sys.executable, "-m", "robinhood_controller.cli", "policies"], env=env_for(copy),
                         capture_output=True, text=True, timeout=60, check=True).stdout
    lines = out.splitlines()
    assert "even step=0.5 -- move every partition a step towards an even split" in lines
    assert {"even", "robinhood", "static"} <= {ln.split()[0] for ln in lines}
    out = subprocess.run([str(copy / "bin" / "appserver"), "--list-dispatch-policies"], capture_output=True,
                         text=True, timeout=60, check=True).stdout
    assert "pinned replica=0 -- every batch to one configured replica" in out.splitlines()
    # And the repository itself does not have them: they came from the new files.
    out = subprocess.run([str(REPO / "bin" / "appserver"), "--list-dispatch-policies"], capture_output=True,
                         text=True, timeout=60, check=True).stdout
    assert "pinned" not in out


def test_topology_app_server_and_controller_use_them(copy: Path, tmp_path: Path,
                                                     free_address: Callable[[], str]) -> None:
    a = {k: free_address() for k in ("rbc_grpc", "rbc_http", "r0", "h0", "r1", "h1", "r2", "h2", "app", "mc1", "mc2",
                                           "ctl")}
    topo = tmp_path / "topology.yaml"
    topo.write_text(f"""
rbc_server: {{grpc: "{a['rbc_grpc']}", http: "{a['rbc_http']}"}}
backends:
  - {{id: 0, name: kv0, type: kv, replicas: [{{grpc: "{a['r0']}", http: "{a['h0']}"}}, {{grpc: "{a['r1']}", http: "{a['h1']}"}}]}}
  - {{id: 1, name: kv1, type: kv, replicas: [{{grpc: "{a['r2']}", http: "{a['h2']}"}}]}}
app_servers:
  - id: app0
    http: "{a['app']}"
    cache_budget_mb: 48
    partitions: {{kv0: {{addr: "{a['mc1']}", initial_mb: 32}}, kv1: "{a['mc2']}"}}
    dispatch: {{policy: pinned, replica: 1}}
    controller: {{policy: {{name: even, step: 0.5}}, min_partition_mb: 8, interval: 200ms, metrics: "{a['ctl']}"}}
""")
    env = env_for(copy)
    # Bad parameters of either policy are refused, naming the field.
    bad = topo.read_text().replace("replica: 1}", "replica: -1}")
    (tmp_path / "bad.yaml").write_text(bad)
    res = subprocess.run([str(copy / "bin" / "appserver"), "--topology", str(tmp_path / "bad.yaml"), "--id", "app0",
                          "--check"], capture_output=True, text=True, timeout=60)
    assert res.returncode == 2 and "app_servers[0].dispatch.replica: -1 is out of range [0, 1000]" in res.stderr
    # Every reader holds the new declarations: topocheck, and the Python loader.
    res = subprocess.run([str(copy / "bin" / "topocheck"), str(tmp_path / "bad.yaml")], capture_output=True,
                         text=True, timeout=60)
    assert res.returncode == 2 and "app_servers[0].dispatch.replica: -1 is out of range [0, 1000]" in res.stderr
    (tmp_path / "bad-step.yaml").write_text(topo.read_text().replace("step: 0.5}", "step: 2}"))
    res = subprocess.run([str(copy / "bin" / "topocheck"), str(tmp_path / "bad-step.yaml")], capture_output=True,
                         text=True, timeout=60)
    assert res.returncode == 2 and "app_servers[0].controller.policy.step: 2.0 is out of range (0, 1]" in res.stderr
    res = subprocess.run([sys.executable, "-m", "robinhood_controller.cli", "plan", "--topology", str(topo),
                          "--id", "app0", "--policy-param", "step=2"], env=env, capture_output=True, text=True,
                         timeout=60)
    assert res.returncode == 2 and "controller.policy.step (from --policy-param): 2.0 is out of range (0, 1]" in res.stderr

    out, ready = tmp_path / "out", tmp_path / "ready"
    log = tmp_path / "up.log"  # a file, never a pipe nobody reads: a full pipe would block `up`
    with log.open("w") as fh:
        p = subprocess.Popen([sys.executable, "-m", "robinhood_testbed.cli", "up", "--topology", str(topo), "--out",
                              str(out), "--ready-file", str(ready)], env=env, stdout=fh,
                             stderr=subprocess.STDOUT, text=True, preexec_fn=sigint_default)
    try:
        wait_ready_file(p, ready, "up --topology", timeout=90, log=log)
        for i in range(20):
            body = json.dumps({"t": 0, "d": [{"kv0": {"S": [64], "U": [f"k{i}"], "C": [0]}}]}).encode()
            req = urllib.request.Request(f"http://{a['app']}/v1/request", data=body, method="POST")
            with urllib.request.urlopen(req, timeout=10) as resp:
                assert resp.status == 200

        def served(http: str) -> float:
            text = urllib.request.urlopen(f"http://{http}/metrics", timeout=5).read().decode()
            return sum(float(ln.rsplit(" ", 1)[1]) for ln in text.splitlines()
                       if ln.startswith("backend_queries_served_total"))

        # The pinned dispatch policy sent every batch of kv0 to replica 1.
        assert served(a["h1"]) >= 20 and served(a["h0"]) == 0
        # The even allocation policy moves kv0's 32 MB and kv1's 16 MB towards 24/24.
        deadline = time.monotonic() + 30
        while True:
            text = urllib.request.urlopen(f"http://{a['ctl']}/metrics", timeout=5).read().decode()
            targets = {ln.split('"')[1]: float(ln.rsplit(" ", 1)[1]) for ln in text.splitlines()
                       if ln.startswith("controller_partition_target_bytes{")}
            if targets and abs(targets["kv0"] - 24 * 2**20) < 2**20:
                break
            assert time.monotonic() < deadline, f"targets did not move to the even split: {targets}"
            time.sleep(0.5)
        assert 'policy="even"' in text
    finally:
        interrupt(p)


def test_the_testbed_runs_an_arm_with_them(copy: Path, tmp_path: Path) -> None:
    exp = {
        "name": "plugins", "seed": 2, "duration": "10s",
        "backends": [{"name": "alpha", "type": "kv", "replicas": 2}, {"name": "beta", "type": "kv"}],
        "cache": {"budget_mb": 32},
        "controller": {"interval": "500ms", "min_partition_mb": 8},
        "slo": {"latency": "100ms", "step": "2s", "window": "4s", "warmup": "2s"},
        "trace": {"synth": {"rate": 50, "params": {"queries-per-request": 4, "keys": 500, "mean-size": 1024}}},
        "compare": {"policies": [{"name": "even", "step": 0.25}], "dispatch": [{"policy": "pinned", "replica": 1}]},
    }
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump(exp))
    out = tmp_path / "out"
    res = subprocess.run([sys.executable, "-m", "robinhood_testbed.cli", "compare", "--experiment", str(path),
                          "--cache-modes", "partitioned", "--out", str(out), "--quiet"], env=env_for(copy),
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    arm = out / "even"
    topo = yaml.safe_load((arm / "topology.yaml").read_text())
    app = topo["app_servers"][0]
    assert app["dispatch"] == {"policy": "pinned", "replica": 1}
    assert app["controller"]["policy"] == {"name": "even", "step": 0.25}
    ticks = [json.loads(ln) for ln in (arm / "controller-app0.jsonl").read_text().splitlines()]
    assert ticks and ticks[-1]["policy"] == "even"
    assert json.loads((arm / "replay" / "summary.json").read_text())["sent"] > 100
    assert (out / "p99_over_time.png").exists()
