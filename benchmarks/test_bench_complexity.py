"""Scaling exponents of the library's routines against the complexity claims of §3 / App. D
(``app:caldera_computational_complexity``): time vs size on a log-log scale, fitted slope recorded in
``benchmark.extra_info`` (``fitted_exponent``, plus the claimed and operation-count exponents).

These are measurements, not asserts (small sizes understate asymptotic exponents). Run with
``pytest benchmarks/test_bench_complexity.py --benchmark-enable --benchmark-json out.json``; the sweep uses
``CALDERA_BENCH_SIZES`` (comma-separated, default 128,256,512,1024) and one thread.
"""

from __future__ import annotations

import os

import pytest

from theory.common import torch_threads
from theory.complexity import ROUTINES, Routine, measure_exponent

SIZES = [int(s) for s in os.environ.get("CALDERA_BENCH_SIZES", "128,256,512,1024").split(",")]


@pytest.mark.parametrize("routine", ROUTINES, ids=[r.name.split(" ")[0] for r in ROUTINES])
def test_complexity_exponent(benchmark, routine: Routine):
    result = measure_exponent(routine, SIZES, repeats=3)
    benchmark.group = "complexity"
    benchmark.extra_info.update(
        {
            "routine": routine.name,
            "paper_claim": routine.claim,
            "sweep": routine.sweep,
            "sizes": SIZES,
            "seconds": result["seconds"],
            "fitted_exponent": result["fitted_exponent"],
            "claimed_exponent": routine.claimed_exponent,
            "counted_exponent": routine.counted_exponent,
        }
    )
    fn = routine.setup(SIZES[-1])
    with torch_threads(1):
        benchmark(fn)  # the largest size, timed by pytest-benchmark when enabled
