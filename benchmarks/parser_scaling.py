"""Parser time against output length: the agent's and the simulator's parsers on adversarial model
output (many braces, a cut-off object, prose), at doubling lengths. Linear time shows as a constant
time per character; the ratio of the longest to the shortest per-character time is printed.

    python benchmarks/parser_scaling.py [--max-chars 16000]
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

SHAPES = {
    "open braces": lambda n: "{" * n,
    "brace pairs in prose": lambda n: ("say {x} " * (n // 8 + 1))[:n],
    "cut-off object": lambda n: '{"reply": "' + "a" * (n - 11),
    "object after prose": lambda n: "x" * (n - 60) + '{"reply": "hi", "estimate": {"cooperation": 1}}',
}


def seconds(fn, text: str, repeats: int = 3) -> float:
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn(text)
        best = min(best, time.perf_counter() - t0)
    return best


def main(args) -> dict:
    from sead_ray.agent.prompt import parse_agent_output
    from sead_ray.scenario.scenario import load_scenario
    from sead_ray.user.llm_prompt import parse_user_output
    schema = load_scenario(ROOT / "configs" / "scenarios" / "restaurant_promotion.yaml").schema
    parsers = {"agent": lambda t: parse_agent_output(t, schema), "user": lambda t: parse_user_output(t, schema, (1, 1, 1))}
    lengths = [1000 * 2**k for k in range(10) if 1000 * 2**k <= args.max_chars]
    results: dict = {}
    print(f"{'parser / input':<34}" + "".join(f"{n:>10}" for n in lengths) + "   us/char ratio longest/shortest")
    for pname, parse in parsers.items():
        for shape, make in SHAPES.items():
            per_char = [seconds(parse, make(n)) / n * 1e6 for n in lengths]
            ratio = per_char[-1] / per_char[0]
            results[f"{pname}: {shape}"] = {"lengths": lengths, "us_per_char": per_char, "ratio": ratio}
            print(f"{pname + ': ' + shape:<34}" + "".join(f"{v:>10.3f}" for v in per_char) + f"   x{ratio:.2f}")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))
    return results


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--max-chars", type=int, default=16000)
    p.add_argument("--json", default=None)
    main(p.parse_args())
