"""Peak memory of a job in GB, from shapes and dtypes (formulas in :func:`job_memory`), not measured: what
``caldera cost`` reports and the SLURM profile requests."""

from __future__ import annotations

from typing import Any

from caldera.experiments.planning.rules import Rule
from caldera.experiments.planning.workload import (
    dense_eval_bytes,
    eval_pass_tokens,
    shapes_of,
    variant_bits,
    vocab_size,
)

#: memory of the device one job gets, GB (the SLURM profile's GPUs: 80 GB A100/H100; a CPU job: a 128 GB node),
#: against which ``eval.stream_layers: auto`` decides (:func:`evaluate_streams`)
DEVICE_GB = {"cuda": 80.0, "cpu": 128.0}


def evaluate_streams(config: dict[str, Any], model_key: str, device_gb: float, bytes_per: int = 2) -> bool:
    """Whether the dense evaluation of ``model_key`` runs layer-streamed on a device of ``device_gb`` GB: the
    rule of :func:`caldera.eval.streamed.should_stream` (``eval.stream_layers``; ``auto``: the weights take
    more than 80 % of the device) applied to the predicted weights."""
    from caldera.eval.streamed import should_stream
    from caldera.experiments.planning.settings import EvalSettings

    mode = EvalSettings.from_block(config["eval"]).stream_layers
    return should_stream(mode, dense_eval_bytes(model_key, bytes_per), device_gb * 1e9)


def job_memory(rule: str, model_key: str, config: dict[str, Any], *, bytes_per: int = 2,
               bits: float | None = None, device_gb: float = DEVICE_GB["cuda"]) -> dict[str, float]:
    """Peak memory of one job in GB, from shapes and dtypes: ``{"host", "device"}`` (device 0 on the CPU path:
    everything is host). ``bytes_per``: the dense dtype's bytes (2: fp16/bf16).

    * hessians (:class:`caldera.pipeline.partial.LazyLayers`: one decoder layer read at a time): host = one
      layer's tensors on their way; device = one layer + embeddings and lm_head + the hidden states
      (N·T·hidden, once) + float64 accumulators 8·(3 h² + f²) (+ a float32 xᵀx) + one batch's activations
      B·T·(4h + 3f);
    * compress_layers: host = the layer's weights (stored dtype) + its four float32 Hessians; device = the
      engine's working set for its largest matrix, 64·d² (float64 H, H_rot, its square root and inverse, the
      LDL of H and of H̃; float32 copies) + 28·n·d bytes (float32 W, rotated W, Q, A, Y, residuals);
    * evaluate: device = the model (dense in its dtype, or compressed: ``bits``/8 per linear weight plus the
      rest in its dtype) + logits B·T·vocab in float32 + one layer's activations; host = the model (it is
      loaded there, then moved). A dense model (``bits`` None) that :func:`evaluate_streams` on a device of
      ``device_gb`` is evaluated layer-streamed (:mod:`caldera.eval.streamed`): device = one decoder layer +
      embeddings, final norm and head + one batch's hidden states (in and out) + its activations and logits;
      host = the hidden states of the largest pass's windows / requests (:func:`eval_pass_tokens` · hidden, in
      the model's dtype: held on the host between layers) + one layer on its way from the checkpoint.
    """
    shapes, (h, f, heads, kv, hd), n_layers = shapes_of(model_key)
    layer_params = sum(n * d for n, d in shapes)
    embed = 2 * h * vocab_size(model_key)
    gb = 1e-9
    if rule == Rule.HESSIANS:
        from caldera.experiments.planning.settings import CalibrationSettings

        cal = CalibrationSettings.from_block(config["calibration"])
        N, T, B = cal.n_samples, cal.seq_len, cal.batch_size
        host = layer_params * bytes_per  # a layer's tensors pass through the host as they are read
        dev = ((layer_params + embed) * bytes_per + N * T * h * bytes_per + 8 * (3 * h * h + f * f) + 4 * f * f
               + B * T * (4 * h + 3 * f) * bytes_per)
        return {"host": host * gb, "device": dev * gb}
    if rule == Rule.COMPRESS_LAYERS:
        host = layer_params * bytes_per + 4 * (3 * h * h + f * f)
        dev = max(64 * d * d + 28 * n * d for n, d in shapes)
        return {"host": host * gb, "device": dev * gb}
    if rule == Rule.EVALUATE:
        T = max(spec["seq_len"] for spec in config["eval"]["ppl"].values())
        B = 1
        batch = B * T * vocab_size(model_key) * 4 + B * T * (4 * h + 3 * f) * bytes_per  # logits, activations
        if bits is None and evaluate_streams(config, model_key, device_gb, bytes_per):
            dev = (layer_params + embed) * bytes_per + 2 * B * T * h * bytes_per + batch
            host = max(eval_pass_tokens(config)) * h * bytes_per + layer_params * bytes_per
            return {"host": host * gb, "device": dev * gb}
        lin = layer_params * n_layers * ((bits / 8) if bits else bytes_per)
        dev = lin + embed * bytes_per + batch
        return {"host": (lin + embed * bytes_per) * gb, "device": dev * gb}  # loaded on the host, then moved
    raise ValueError(f"no memory model for rule {rule!r}")


def evaluate_memory(config: dict[str, Any], variants: list[Any], model_key: str,
                    device_gb: float) -> dict[str, float]:
    """Peak memory of the evaluate jobs of ``variants`` (one model's): per side the largest over the jobs. The
    dense model streams when it must (:func:`evaluate_streams`); a compressed variant is held whole at its
    :func:`variant_bits` (dense-sized with ``eval.weights: reconstructed``, which materializes every Ŵ)."""
    reconstructed = (config["eval"].get("weights") or "compressed") == "reconstructed"
    mems = [job_memory(Rule.EVALUATE, model_key, config, device_gb=device_gb,
                       bits=None if reconstructed and v.method != "dense" else variant_bits(v, model_key))
            for v in variants]
    if reconstructed and any(v.method != "dense" for v in variants):  # a materialized model never streams
        lin = dense_eval_bytes(model_key) * 1e-9
        mems.append({"host": lin, "device": lin})
    return {side: max(m[side] for m in mems) for side in ("host", "device")}
