"""The Go packages import downwards only (docs/architecture.md, "Layout"): shared
libraries, then the components, then the workload, then the experiments, then the
simulator; a command lives in the folder of the highest layer it uses."""
from __future__ import annotations

import json
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
MODULE = "github.com/robinhoodcache/robinhood/"

#: Each top-level folder's layer; a package may import its own layer and those below.
LAYERS = {
    "schema": 0, "proto": 0, "lib": 0,
    "backends": 1, "rbcserver": 1, "appserver": 1, "tools": 1,
    "workload": 2,
    "experiment": 3,
    "sim": 4,
    "tests": 5, "deploy": 5,
}


def packages() -> list[dict]:
    out = subprocess.run(["go", "list", "-json", "./..."], cwd=REPO, capture_output=True, text=True, check=True,
                         timeout=300).stdout
    dec, i, pkgs = json.JSONDecoder(), 0, []
    while i < len(out):
        obj, i = dec.raw_decode(out, i)
        pkgs.append(obj)
        while i < len(out) and out[i].isspace():
            i += 1
    return pkgs


def upward(pkgs: list[dict]) -> list[str]:
    bad = []
    for p in pkgs:
        path = p["ImportPath"].removeprefix(MODULE)
        top = path.split("/")[0]
        assert top in LAYERS, f"{path}: top-level folder {top!r} has no layer in this test (add it)"
        for imp in p.get("Imports", []) + p.get("TestImports", []):
            if imp.startswith(MODULE):
                dep = imp.removeprefix(MODULE).split("/")[0]
                if LAYERS[dep] > LAYERS[top]:
                    bad.append(f"{path} imports {imp.removeprefix(MODULE)}")
    return bad


def test_go_packages_import_downwards_only() -> None:
    pkgs = packages()
    assert len(pkgs) > 30
    bad = upward(pkgs)
    assert not bad, "an import runs up the layers; move the command or the code:\n" + "\n".join(bad)


def test_an_upward_import_is_found() -> None:
    # The check cannot pass by not looking.
    fake = [{"ImportPath": MODULE + "workload/cmd/x", "Imports": [MODULE + "experiment/replay", "fmt"]}]
    assert upward(fake) == ["workload/cmd/x imports experiment/replay"]
