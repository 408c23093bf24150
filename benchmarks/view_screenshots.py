"""Screenshots of `sead-ray view` on a real trained run (the README's pictures): the run page, and one held-out owner
called twice, by the warm-started agent (lost) and by the trained agent (won), each call's page.

    python benchmarks/view_screenshots.py runs/demo --out docs/img

The run must hold two held-out evaluations (dialogues/eval_0000*.jsonl and a later eval_*.jsonl of the same owners,
as `make demo` writes them). The owner shown is the first, in the held-out draw's order, whose call the warm-started
agent lost and the trained agent won (a hard owner where there is one). Needs Chromium (`make chromium`).
"""
from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from pathlib import Path

CHROMIUM = "/usr/bin/chromium"


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("run", type=Path, help="a finished run directory with two held-out evaluations")
    p.add_argument("--out", type=Path, default=Path("docs/img"), help="folder of the PNG files (view-real-*.png)")
    return p.parse_args()


def held_out_pair(run: Path) -> tuple[str, str, int]:
    """(first file, last file, index) of an owner lost after the warm start and won after training; the files named
    from the run's parent folder (the folder the viewer serves)."""
    files = sorted((run / "dialogues").glob("eval_*.jsonl"))
    cold = [f for f in files if re.fullmatch(r"eval_\d{4}\.jsonl", f.name)]
    if len(cold) < 2:
        raise SystemExit(f"{run}/dialogues holds {len(cold)} held-out cold evaluation(s): two are needed")
    first, last = ([json.loads(line) for line in f.read_text().splitlines() if line.strip()] for f in (cold[0], cold[-1]))
    turned = [i for i, (a, b) in enumerate(zip(first, last)) if a["outcome"] != "success" and b["outcome"] == "success"]
    if not turned:
        raise SystemExit(f"no held-out owner of {run} was lost after the warm start and won after training")
    hard = [i for i in turned if first[i]["profile"].get("user_set") == "hard"]
    return (f"{run.name}/dialogues/{cold[0].name}", f"{run.name}/dialogues/{cold[-1].name}", (hard or turned)[0])


def main() -> None:
    args = parse_args()
    from playwright.sync_api import sync_playwright
    first, last, index = held_out_pair(args.run)
    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    run = args.run.resolve()
    server = subprocess.Popen([sys.executable, "-m", "sead_ray.cli.main", "view", str(run.parent), "--port", "0"],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)   # paths confined to it
    try:
        line = ""
        while "open http" not in line:
            line = server.stdout.readline()
            if not line and server.poll() is not None:
                raise SystemExit("sead-ray view exited before serving")
        url = re.search(r"http://127\.0\.0\.1:\d+", line).group(0)
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM)
            page = browser.new_page(viewport={"width": 1280, "height": 860})
            shots = {"run": (f"#/run?path={run.name}", "[data-testid=iterations] tr[data-iteration]"),
                     "call-warm-start": (f"#/call?file={first}&index={index}", "[data-testid=turn]"),
                     "call-trained": (f"#/call?file={last}&index={index}", "[data-testid=turn]")}
            for name, (route, ready) in shots.items():
                page.goto(f"{url}/{route}")
                page.wait_for_selector(ready)
                if name != "run":   # the call page's 'same profile elsewhere' list comes a moment later
                    page.wait_for_selector("[data-testid=same-profile] li", timeout=120_000)
                page.screenshot(path=str(out / f"view-real-{name}.png"), full_page=True)
                print(f"{out / f'view-real-{name}.png'}: {route}")
            browser.close()
    finally:
        server.terminate()
        server.wait(timeout=30)
    print(f"held-out owner #{index}: lost after the warm start ({first}), won after training ({last})")


if __name__ == "__main__":
    main()
