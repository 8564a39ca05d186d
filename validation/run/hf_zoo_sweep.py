"""Every model type transformers registers, shrunk, on the simulated GPU: a crash finder. For each
`model_type` of `CONFIG_MAPPING`: its default config made small (2 layers, width 64, 4 heads,
its vocabulary as it is), `AutoModel.from_config` on the CPU, its `dummy_inputs` run forward on the CPU, then
the same model moved to "cuda" and run forward and backward there; a model whose CPU forward succeeds
and whose simulated run raises, or gives outputs of other shapes or dtypes, is a finding. Run it
under the twin, no GPU needed:

    python -m vramscope run validation/run/hf_zoo_sweep.py OUT.jsonl [MODEL_TYPE...]

(`validation/run/hf_zoo_sweep.sh OUT.jsonl` runs it in chunks of model types under a memory limit,
going on past a type that kills its process.)

OUT.jsonl gets one line per model type ({"model_type", "stage", "detail"}: stage "cuda" or
"mismatch" for findings, "build"/"inputs"/"cpu" where the CPU side could not run it and the type was
left out); the last line printed is the totals.
"""

import json
import sys
import traceback
import warnings

import torch
from torch.utils._pytree import tree_flatten
from transformers import CONFIG_MAPPING, AutoModel

warnings.simplefilter("ignore")
out_path = sys.argv[1]
only = set(sys.argv[2:])

SMALL = {
    "hidden_size": 64,
    "d_model": 64,
    "n_embd": 64,
    "dim": 64,
    "embed_dim": 64,
    "intermediate_size": 128,
    "ffn_dim": 128,
    "encoder_ffn_dim": 128,
    "decoder_ffn_dim": 128,
    "d_ff": 128,
    "num_hidden_layers": 2,
    "num_layers": 2,
    "n_layer": 2,
    "encoder_layers": 2,
    "decoder_layers": 2,
    "num_decoder_layers": 2,
    "num_attention_heads": 4,
    "n_head": 4,
    "encoder_attention_heads": 4,
    "decoder_attention_heads": 4,
    "num_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 16,
    "max_position_embeddings": 512,
}


def shrink(config):
    for sub in [config, *(getattr(config, k) for k in getattr(config, "sub_configs", {}) or {})]:
        if sub is None:
            continue
        for key, val in SMALL.items():
            if hasattr(sub, key) and isinstance(getattr(sub, key), int):
                try:
                    setattr(sub, key, val)
                except Exception:
                    pass
    return config


def dummy_inputs(model) -> dict:
    """The model's `dummy_inputs`, or for a model whose main input is not token ids, one made from
    its config: an image, a spectrogram or a waveform."""
    config, name = model.config, model.main_input_name
    if name == "pixel_values":
        vision = getattr(config, "vision_config", None) or config
        size = getattr(vision, "image_size", 224)
        size = size[0] if isinstance(size, (list, tuple)) else size
        return {name: torch.randn(1, getattr(vision, "num_channels", 3), size, size)}
    if name == "input_features":
        frames = 2 * getattr(config, "max_source_positions", 1500)
        return {name: torch.randn(1, getattr(config, "num_mel_bins", 80), frames), **_decoder(model)}
    if name == "input_values":
        return {name: torch.randn(1, 16000), **_decoder(model)}
    return dict(model.dummy_inputs)


def _decoder(model) -> dict:
    if getattr(model.config, "is_encoder_decoder", False):
        return {"decoder_input_ids": torch.tensor([[model.config.decoder_start_token_id or 0, 1, 2]])}
    return {}


def shapes(result):
    if hasattr(result, "to_tuple"):
        result = result.to_tuple()
    leaves, _ = tree_flatten(result)
    return [(tuple(t.shape), str(t.dtype)) for t in leaves if isinstance(t, torch.Tensor)]


def to(tree, device):
    leaves, spec = tree_flatten(tree)
    return spec.unflatten([x.to(device) if isinstance(x, torch.Tensor) else x for x in leaves])


totals = {"types": 0, "ran": 0, "cuda": 0, "mismatch": 0, "left_out": 0}
with open(out_path, "w") as out:

    def note(model_type, stage, detail):
        out.write(json.dumps({"model_type": model_type, "stage": stage, "detail": detail[:600]}) + "\n")
        out.flush()

    for model_type in sorted(CONFIG_MAPPING.keys()):
        if only and model_type not in only:
            continue
        totals["types"] += 1
        print(f"hf_zoo_sweep: {model_type}", flush=True)
        stage = "build"
        try:
            torch.manual_seed(0)
            model = AutoModel.from_config(shrink(CONFIG_MAPPING[model_type]()))
            model.train()
            stage = "inputs"
            inputs = dummy_inputs(model)
            stage = "cpu"
            with torch.no_grad():
                expected = shapes(model(**inputs))
        except BaseException as e:  # noqa: BLE001 (a model that cannot run on the CPU is left out)
            totals["left_out"] += 1
            note(model_type, stage, f"{type(e).__name__}: {str(e)[:300]}")
            continue
        totals["ran"] += 1
        try:
            model = model.to("cuda")
            result = model(**to(inputs, "cuda"))
            got = shapes(result)
            floats = [t for t in tree_flatten(result.to_tuple())[0] if isinstance(t, torch.Tensor)]
            loss = sum(t.float().sum() for t in floats if t.is_floating_point() and t.requires_grad)
            if isinstance(loss, torch.Tensor):
                loss.backward()
            if got != expected:
                totals["mismatch"] += 1
                note(model_type, "mismatch", f"cpu {expected} cuda {got}")
        except BaseException as e:  # noqa: BLE001
            totals["cuda"] += 1
            tb = traceback.extract_tb(e.__traceback__)
            where = next((f"{f.filename}:{f.lineno}" for f in reversed(tb) if "vramscope" in f.filename), "")
            note(model_type, "cuda", f"{type(e).__name__}: {str(e)[:400]} @ {where}")
        del model
print(json.dumps(totals))
