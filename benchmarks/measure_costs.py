"""Measure the per-component costs `caldera cost` predicts from (caldera.experiments.planning.cost), on one device.

    nice -n 10 python benchmarks/measure_costs.py --device cpu --out benchmarks/results/costs-cpu.json
    python benchmarks/measure_costs.py --device cuda --out benchmarks/results/costs-cuda.json   # on a GPU machine

Times every component once per shape (best of --repeats) with the engine's own functions and fits each law's
coefficients (non-negative least squares on relative residuals). A few minutes on a CPU.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from cost_components import measure_components, points_from_benchmark  # noqa: E402

from caldera.atomic import write_atomic  # noqa: E402
from caldera.experiments.planning.cost import refit  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--shapes", default="512x1024,1024x1024,2048x2048", help="n x d, comma-separated")
    ap.add_argument("--rank", type=int, default=256)
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--out", required=True)
    ap.add_argument("--benchmark-json", nargs="*", default=[],
                    help="pytest-benchmark JSONs of test_bench_paper_shapes.py on the same device: their paper-shape "
                    "points join the fit (benchmarks/results/paper_shapes_cpu_*.json)")
    args = ap.parse_args()
    shapes = [tuple(int(v) for v in s.split("x")) for s in args.shapes.split(",")]
    costs = measure_components(args.device, shapes, k=args.rank, repeats=args.repeats)
    for path in args.benchmark_json:
        refit(costs, points_from_benchmark(path))
    costs["command"] = " ".join(sys.argv)
    write_atomic(args.out, json.dumps(costs, indent=1, sort_keys=True) + "\n")
    for name in costs["components"]:
        pts = ", ".join(f"{p['n']}x{p['d']}: {p['s']:.3f}s" for p in costs["points"][name])
        print(f"{name:20s} {pts}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
