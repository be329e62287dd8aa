"""The SLURM profile's ``set-resources`` from ``caldera cost``'s predictions: per rule a runtime, memory and GPU
request (``caldera cost --slurm``)."""

from __future__ import annotations

import math
from typing import Any

from caldera.experiments.planning.cost import LAWS, estimate
from caldera.experiments.planning.rules import Rule

#: rules that run the engine or a model forward: a GPU each on a cluster
GPU_RULES = (Rule.HESSIANS, Rule.COMPRESS_LAYERS, Rule.COMPRESS_VARIANT, Rule.EVALUATE, Rule.REPLICATE,
             Rule.ABLATION_TRACES, Rule.LPLR_TRACES)


def slurm_resources(config: dict[str, Any], costs: dict[str, Any] | None, *, margin: float = 1.5,
                    overhead_gb: float = 4.0, device: str | None = None) -> dict[str, dict[str, Any]]:
    """``set-resources`` of the SLURM profile from the predictions: per rule the largest job over the models,
    ``runtime`` (minutes) = predicted time x ``margin`` (at least 10; omitted without ``costs``: memory needs
    no timing) and ``mem_mb`` = (host memory, plus the device's when the device is the CPU, + ``overhead_gb``
    for the runtime and CUDA context) x 1.25. A GPU for every rule of :data:`GPU_RULES`, unless the jobs run on
    the CPU: the device of ``costs``, else ``device`` (None: CUDA)."""
    zero = {"components": {name: {"coef": [0.0] * len(LAWS[name])} for name in LAWS}, "device": "cuda"}
    est = estimate(config, costs or zero)
    where = costs["device"] if costs is not None else (device or "cuda")
    on_cpu = not str(where).startswith("cuda")
    out: dict[str, dict[str, Any]] = {}
    for e in est.values():
        for rule, r in e["rules"].items():
            mem = r["mem_gb"]["host"] + (r["mem_gb"]["device"] if on_cpu else 0.0)
            res = out.setdefault(rule, {"gpu": 0 if on_cpu else 1, "mem_mb": 0})
            res["mem_mb"] = max(res["mem_mb"], int(math.ceil((mem + overhead_gb) * 1.25 * 1000 / 1000) * 1000))
            if costs is not None:
                res["runtime"] = max(res.get("runtime", 10), int(math.ceil(r["s_per_job"] * margin / 60)))
    return out


def slurm_yaml(resources: dict[str, dict[str, Any]]) -> str:
    return "\n".join(f"  {rule}: {{{', '.join(f'{k}: {v}' for k, v in sorted(r.items()))}}}"
                     for rule, r in sorted(resources.items()))
