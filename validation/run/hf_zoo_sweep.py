"""Every model type transformers registers, shrunk, on the simulated GPU: a crash finder. For each
`model_type` of `CONFIG_MAPPING`: its default config made small (2 layers, width 64, 4 heads,
its vocabulary as it is), `AutoModel.from_config` on the CPU, its `dummy_inputs` run forward on the CPU, then
the same model moved to "cuda" and run forward and backward there (`zoo.py`'s loop). Run it under the
twin, no GPU needed:

    python -m vramscope run validation/run/hf_zoo_sweep.py OUT.jsonl [MODEL_TYPE...]

(`bash validation/run/zoo_sweep.sh validation/run/hf_zoo_sweep.py OUT.jsonl` runs it in chunks under a
memory limit, going on past a type that kills its process.)
"""

import os
import sys
import warnings

import torch
from transformers import CONFIG_MAPPING, AutoModel

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from zoo import sweep

warnings.simplefilter("ignore")

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


def build(model_type):
    model = AutoModel.from_config(shrink(CONFIG_MAPPING[model_type]()))
    return model, dummy_inputs(model)


if __name__ == "__main__":
    only = set(sys.argv[2:])
    names = [t for t in sorted(CONFIG_MAPPING.keys()) if not only or t in only]
    sweep(names, build, sys.argv[1], "hf_zoo_sweep")
