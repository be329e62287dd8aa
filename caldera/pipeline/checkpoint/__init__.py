"""Compressed-model checkpoints: a folder of safetensors + JSON, no pickle, that transformers also loads.

Layout of a checkpoint folder (format 2)::

    model.safetensors      every tensor: the base model's non-linear weights (embeddings, norms, lm_head
                           unless tied to the embeddings) under their usual names, plus the state of every
                           CompressedLinear under its module path
                           (``model.layers.0.self_attn.q_proj.Q_codes``)
    config.json            the base model's config plus ``quantization_config: {"quant_method": "caldera",
                           "format_version": 2, "method": ...}``: ``AutoModelForCausalLM.from_pretrained`` loads
                           the folder once ``caldera`` is imported (:mod:`caldera.pipeline.hf`); and
                           ``transformers_weights`` set to a text that is no file (:data:`NEEDS_CALDERA`): a
                           transformers without caldera refuses the folder with it instead of building the
                           model with random weights
    caldera_config.json    format version, base model config dict, method name + config, per-module
                           metadata (shapes, rank, bits, quantizer names), bits summary, errors, per module the
                           fingerprint [Σ W, Σ W²] of what its tensors decode to (RHT basis), and the content
                           ``manifest``: sha256 of every tensor (:func:`tensor_digest`, RHT signs included), of the
                           base config (:func:`json_digest`) and of every other file (config.json, tokenizer)
    tokenizer files        optional (``tokenizer.save_pretrained``)
    generation_config.json the base model's, byte for byte, when it has one
    README.md              the model card (:mod:`.card`): base model, method, bits, calibration, caldera version
                           and commit (the ``provenance`` key of caldera_config.json, :mod:`.provenance`), how
                           to load it
    checksums.json         sha256 of every other file

The model files (:data:`MODEL_FILES`: ``model.safetensors``, ``config.json``, ``caldera_config.json``) are what
the model computes from; any other file (a tokenizer saved later, a ``README.md`` model card, ``.gitattributes``)
cannot change it and is not refused. ``config.json``'s ``quantization_config`` states the scheme
(:func:`quantization_scheme`: method, Q and factor bits, ranks, quantizers, decoder layers kept dense), derived
from ``caldera_config.json`` and verified against it.

The folder is written under a temporary sibling name and renamed into place (:func:`caldera.atomic.atomic_dir`).
:func:`load_compressed` and the transformers quantizer verify before building anything, both from one reading
of the structure (:func:`read_structure`, before any tensor value is read): every model file's checksum, the
config's structure (:func:`check_config`), the content manifest (:func:`verify_manifest`: checksums only prove the
files are the ones listed, the manifest that the tensors, base config and config.json are the ones written), the
safetensors header (:func:`header_tensors`) against the model the base config builds (:func:`check_structure`:
shapes, the ``tied`` map equal to what the architecture ties, every weight stored once and nothing foreign, the
names in the manifest, every tensor of the shape and dtype its module's metadata and the scheme name, the
uncompressed weights in one dtype). Then the values, by both (:func:`check_values`): finite
(:func:`check_tensors`), equal to their digests (:func:`check_tensor_manifest`), meaning what the scheme says
(:func:`check_stored_tensors`: ±1 RHT signs, finite positive scales, codes in their quantizer's range); each
module's fingerprint (metadata against tensors) and the summaries that ``caldera info`` reports
(:func:`check_summary`: ``bits`` recomputed from the modules, ``dense_layers``, ``errors``, ``ft_rank``, the method
config's ``rank`` and bits). The manifest, fingerprints and
checksums only prove that nothing changed since they were computed (anyone can recompute them); these checks refuse
content that no writer produces. A missing manifest or fingerprint is an error; ``verify=False`` is the one,
explicit opt-out. Only then does it build ``AutoModelForCausalLM.from_config(base_config)`` (on the meta device: no
random initialization, no hub access), swap in the ``CompressedLinear`` modules and assign the stored tensors.
Every inconsistency is a ``ValueError`` naming the checkpoint and the field or file. Format 1 (no config.json, no
manifest) is read only by :func:`convert_checkpoint` (``caldera convert``).

The package: :mod:`.format` (file names, versions, digests, fingerprints, bits and the derived configs),
:mod:`.provenance`, :mod:`.card`, :mod:`.writer`, :mod:`.verify`, :mod:`.loader` and :mod:`.convert`; this module
names their public API.
"""

from __future__ import annotations

from caldera.pipeline.checkpoint.card import (  # noqa: F401
    card_facts,
    model_card,
)
from caldera.pipeline.checkpoint.convert import (  # noqa: F401
    convert_checkpoint,
)
from caldera.pipeline.checkpoint.format import (  # noqa: F401
    CARD_FILE,
    CHECKSUM_FILE,
    CONFIG_FILE,
    FINGERPRINT_RTOL,
    FORMAT_VERSION,
    GENERATION_CONFIG_FILE,
    GUARD_KEY,
    HF_CONFIG_FILE,
    LEGACY_FORMAT,
    LINEARS,
    MODEL_FILE,
    MODEL_FILES,
    NEEDS_CALDERA,
    QUANT_METHOD,
    TOKENIZER_FILES,
    base_config_dict,
    bits_summary,
    checkpoint_bits,
    hf_config_dict,
    json_digest,
    layers_prefix,
    matrix_bits,
    model_linear_shapes,
    quantization_scheme,
    replace_module,
    tensor_digest,
    tied_keys,
    weight_fingerprint,
)
from caldera.pipeline.checkpoint.loader import (  # noqa: F401
    REFERENCE_VOCAB,
    attach_checkpoint_config,
    build_base_model,
    cast_dense,
    load_compressed,
    materialize,
    reference_buffers,
    resolve_checkpoint,
)
from caldera.pipeline.checkpoint.provenance import (  # noqa: F401
    base_generation_config,
    checkpoint_provenance,
)
from caldera.pipeline.checkpoint.verify import (  # noqa: F401
    check_config,
    check_fingerprint,
    check_module,
    check_stored_tensors,
    check_structure,
    check_summary,
    check_tensor_manifest,
    check_tensors,
    check_values,
    header_tensors,
    other_file_changes,
    read_checkpoint,
    read_config,
    read_structure,
    verify_checksums,
    verify_manifest,
)
from caldera.pipeline.checkpoint.writer import (  # noqa: F401
    save_compressed,
    write_checkpoint,
)
