"""`user.engines: auto` on a real multi-node local Ray cluster: the pool follows rollout nodes."""
import json
import subprocess
import sys

import pytest

from tests.conftest import ROOT

pytestmark = pytest.mark.slow


def test_pool_grows_onto_a_joining_node_and_drops_a_leaving_one():
    proc = subprocess.run([sys.executable, "-m", "tests.helpers.elastic_pool"], cwd=ROOT, capture_output=True,
                          text=True, timeout=600)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("ELASTIC_POOL_REPORT ")]
    assert proc.returncode == 0 and lines, proc.stdout[-3000:] + proc.stderr[-3000:]
    report = json.loads(lines[-1].split(" ", 1)[1])
    # one rollout unit at start: one engine, serving every turn
    assert report["start"] == {"engines": ["user-0"], "served": ["user-0"]}
    # a node offering two rollout units joins: two more engines, on that node, and they serve turns
    grow = report["grow"]
    assert (grow["before"], grow["after"], grow["removed"]) == (1, 3, [])
    assert sorted(grow["added"]) == ["user-1", "user-2"]
    assert report["grow_served"] == ["user-0", "user-1", "user-2"]
    assert report["grow_nodes"] == 2
    assert report["unchanged"] is None
    # the node leaves: its engines and their placement groups go, the survivor serves everything
    shrink = report["shrink"]
    assert (shrink["before"], shrink["after"], shrink["added"]) == (3, 1, [])
    assert sorted(shrink["removed"]) == ["user-1", "user-2"]
    assert report["shrink_served"] == ["user-0"]
    assert report["groups_left"] == 1
