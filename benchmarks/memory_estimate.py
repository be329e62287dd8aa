"""The commands' memory estimates against the measured peak, on the CPU: ``caldera eval ppl``'s
(:func:`caldera.cli.common.forward_memory`) and ``caldera hessians``' (:func:`caldera.cli.hessians.hessian_memory`).

Each estimate is what the command compares with the memory this machine has available before it runs (refusing a
run that cannot fit): the bytes the run holds beyond the model's own weights. For a few small configurations,
offline (a tiny LLaMA written here; SmolLM2-135M when its offline asset is built: ``caldera assets --only
smollm2``), each job runs in a child process: the model loaded as the commands load it (float32 on the CPU) and
every weight read once (a float32 file's tensors may be mapped and paged in on first use, which is the weights'
memory, not the run's), its resident set noted and its peak reset (``/proc/self/clear_refs``), then the job the
estimate describes (a perplexity forward of the windows, or the layer-by-layer Hessian collection) on seeded random
token ids. The child's peak resident set comes from ``resource.getrusage(RUSAGE_CHILDREN).ru_maxrss`` of a bare
interpreter that waits for it; the measured working memory is that peak less the resident set after the load.

    python benchmarks/memory_estimate.py --out benchmarks/results/memory_estimate_cpu

writes ``OUT.md`` and ``OUT.json``; a few minutes on two cores."""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from caldera.atomic import write_atomic  # noqa: E402

#: (model, job, sizes): the configurations measured; "tiny" is written by :func:`write_tiny`, "smollm2" is the
#: offline asset (skipped, and said so in the record, when it is not built)
CONFIGS: list[tuple[str, str, dict[str, int]]] = [
    ("tiny", "ppl", {"seq_len": 512, "batch": 8}),
    ("tiny", "hessians", {"n_samples": 64, "seq_len": 256, "batch": 8}),
    ("smollm2", "ppl", {"seq_len": 512, "batch": 1}),
    ("smollm2", "ppl", {"seq_len": 512, "batch": 4}),
    ("smollm2", "ppl", {"seq_len": 2048, "batch": 1}),
    ("smollm2", "hessians", {"n_samples": 8, "seq_len": 256, "batch": 4}),
]

#: a bare interpreter that runs the child and reports its peak resident set (KiB on Linux)
WAIT = r"""
import json, resource, subprocess, sys
r = subprocess.run(sys.argv[1:], capture_output=True, text=True)
print(json.dumps({"rc": r.returncode, "stdout": r.stdout, "stderr": r.stderr[-3000:],
                  "maxrss_kib": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss}))
"""


def rss_bytes() -> int:
    """This process's resident set now (``/proc/self/statm``)."""
    pages = int(Path("/proc/self/statm").read_text().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE")


def reset_peak() -> bool:
    """Reset this process's peak resident set to the current one (``clear_refs`` 5); False where not allowed."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
        return True
    except OSError:
        return False


def write_tiny(folder: Path) -> Path:
    """The tests' tiny LLaMA (2 layers, hidden 64, vocabulary 128) with 512 positions and its word tokenizer."""
    from tests.helpers import tiny_llama, word_tokenizer

    tiny_llama(0, max_positions=512, bos_token_id=1, eos_token_id=2, pad_token_id=0).save_pretrained(str(folder))
    word_tokenizer().save_pretrained(str(folder))
    return folder


def estimate(config: Any, job: str, sizes: dict[str, int]) -> int:
    """The command's estimate (bytes beyond the weights) for ``job`` on the model of transformers ``config``."""
    from caldera.cli.common import forward_memory
    from caldera.cli.hessians import hessian_memory

    if job == "ppl":
        return forward_memory(config, sizes["batch"], sizes["seq_len"])
    return hessian_memory(config, sizes["n_samples"], sizes["batch"], sizes["seq_len"])


def child(folder: str, job: str, sizes: dict[str, int]) -> dict[str, Any]:
    """In the measured process: load the model as the commands do, note the resident set, reset the peak, run the
    job; returns what the parent records beside the peak."""
    from caldera import openmp

    openmp.limit_spin()  # as the caldera command does, before torch loads
    import torch

    from caldera.pipeline.models import load_dense

    model, _ = load_dense(folder)
    with torch.no_grad():  # every weight resident (a float32 file's tensors may be mapped, read on first use)
        for t in model.state_dict().values():
            t.sum()
    vocab = model.config.vocab_size
    g = torch.Generator().manual_seed(0)
    n = sizes["batch"] if job == "ppl" else sizes["n_samples"]
    ids = torch.randint(3, vocab, (n, sizes["seq_len"]), generator=g)
    after_load = rss_bytes()
    reset = reset_peak()
    t0 = time.perf_counter()
    with torch.no_grad():
        if job == "ppl":
            from caldera.eval.perplexity import perplexity

            perplexity(model, ids, sizes["seq_len"], batch_size=sizes["batch"], progress=False)
        else:
            from caldera.pipeline.hessians import collect_hessians

            with tempfile.TemporaryDirectory() as out:
                collect_hessians(model, ids, out, batch_size=sizes["batch"], progress=False)
    return {"rss_after_load": after_load, "peak_reset": reset, "job_s": time.perf_counter() - t0,
            "threads": torch.get_num_threads()}


def measure(folder: str, job: str, sizes: dict[str, int], timeout: float) -> dict[str, Any]:
    """Run :func:`child` in a fresh process under :data:`WAIT`: its record plus ``peak`` (bytes) and
    ``measured`` (peak less the resident set after the load)."""
    cmd = [sys.executable, "-c", WAIT, sys.executable, __file__, "--child", json.dumps([folder, job, sizes])]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                       env={**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"})
    wait = json.loads(r.stdout)
    if wait["rc"] != 0:
        raise RuntimeError(f"{job} {sizes} on {folder} failed:\n{wait['stderr']}")
    rec = json.loads(wait["stdout"].strip().splitlines()[-1])
    rec["peak"] = wait["maxrss_kib"] * 1024
    rec["measured"] = rec["peak"] - rec["rss_after_load"]
    return rec


def run(models: dict[str, str | None], timeout: float = 240.0) -> dict[str, Any]:
    """Every configuration of :data:`CONFIGS` whose model is in ``models`` (name -> folder, None: not available)."""
    from caldera.cli.common import model_config

    rows = []
    for name, job, sizes in CONFIGS:
        folder = models.get(name)
        if folder is None:
            rows.append({"model": name, "job": job, "sizes": sizes, "skipped": "model not available"})
            continue
        est = estimate(model_config(folder), job, sizes)
        rows.append({"model": name, "job": job, "sizes": sizes, "estimate": est,
                     **measure(folder, job, sizes, timeout)})
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    return {"rows": rows, "commit": commit.stdout.strip() or None,
            "machine": {"platform": platform.platform(), "cpus": os.cpu_count(), "python": platform.python_version()}}


def _mib(b: float) -> str:
    return f"{b / 2**20:.1f}"


def render(res: dict[str, Any], command: str) -> str:
    """Markdown of :func:`run`'s result: per configuration the estimate, the resident set after the load, the
    peak, the measured working memory and the estimate's ratio to it."""
    m = res["machine"]
    lines = ["# Memory estimates against the measured peak (CPU)", "",
             f"Made with `{command}` at {res.get('commit')} on {m['platform']} ({m['cpus']} CPUs, Python "
             f"{m['python']}).", "",
             "The estimate is what `caldera eval ppl` (`forward_memory`) and `caldera hessians` (`hessian_memory`) "
             "compare with the available memory before a run: the bytes held beyond the model's weights. Measured: "
             "the child's peak resident set (getrusage of children, ru_maxrss) less its resident set after the "
             "model load with every weight read once (peak reset there). MiB.", "",
             "| model | job | sizes | estimate | after load | peak | measured | estimate / measured | covers |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in res["rows"]:
        sizes = ", ".join(f"{k} {v}" for k, v in r["sizes"].items())
        if "skipped" in r:
            lines.append(f"| {r['model']} | {r['job']} | {sizes} | {r['skipped']} | | | | | |")
            continue
        ratio = f"×{r['estimate'] / r['measured']:.2f}" if r["measured"] > 0 else "—"
        note = "" if r["peak_reset"] else " (peak not reset: includes the load)"
        lines.append(f"| {r['model']} | {r['job']} | {sizes} | {_mib(r['estimate'])} | {_mib(r['rss_after_load'])} | "
                     f"{_mib(r['peak'])} | {_mib(r['measured'])}{note} | {ratio} | "
                     f"{'yes' if r['estimate'] >= r['measured'] else 'no'} |")
    return "\n".join(lines) + "\n"


def available_models(tmp: Path) -> dict[str, str | None]:
    """The tiny model (written into ``tmp``) and SmolLM2's offline folder, or None where it is not built."""
    from caldera.pipeline.models import AssetNotBuilt, model_asset_folder

    try:
        smol: str | None = str(model_asset_folder("smollm2"))
    except AssetNotBuilt:
        smol = None
    return {"tiny": str(write_tiny(tmp / "tiny")), "smollm2": smol}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", help="write OUT.md and OUT.json (default: print the Markdown)")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        print(json.dumps(child(*json.loads(args.child))))
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        res = run(available_models(Path(tmp)))
    command = "python benchmarks/memory_estimate.py" + (f" --out {args.out}" if args.out else "")
    md = render(res, command)
    if args.out:
        write_atomic(f"{args.out}.md", md)
        write_atomic(f"{args.out}.json", json.dumps(res, indent=1) + "\n")
    print(md)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
