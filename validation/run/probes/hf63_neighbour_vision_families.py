"""Neighbour probe (session 63, helper hf; `vramscope run --gpu h100 THIS family:Class[:size],...
[cuda|cpu]`): uncovered transformers 5.17 vision families, default configs, built on DEV in fp32: one
bf16-autocast training step (a sum of the first output floating tensor) at batch 2 and an inference_mode
call."""

import gc
import sys
import traceback

import torch
import transformers
from transformers import AutoConfig

DEV = sys.argv[2] if len(sys.argv) > 2 else "cuda"
torch.manual_seed(0)


def first_float(out):
    for v in out.values() if hasattr(out, "values") else out:
        if isinstance(v, torch.Tensor) and v.is_floating_point():
            return v
        if isinstance(v, (tuple, list)) and v and isinstance(v[0], torch.Tensor):
            return v[0]
    raise RuntimeError("no float output")


def size_of(cfg, default):
    for c in (cfg, getattr(cfg, "vision_config", None), getattr(cfg, "backbone_config", None)):
        s = getattr(c, "image_size", None) if c is not None else None
        if isinstance(s, int):
            return (s, s)
        if isinstance(s, (list, tuple)) and len(s) == 2:
            return tuple(s)
    return default


for item in sys.argv[1].split(","):
    k, clsname, hw = [*item.split(":"), ""][:3]
    model = out = None
    try:
        cls = getattr(transformers, clsname)
        cfg = AutoConfig.for_model(k)
        h, w = (int(hw), int(hw)) if hw else size_of(cfg, (224, 224))
        with torch.device(DEV):
            model = cls._from_config(cfg)
        n = sum(p.numel() for p in model.parameters())
        x = torch.randn(2, 3, h, w, device=DEV)
        model.train()
        with torch.autocast(DEV, dtype=torch.bfloat16):
            out = model(pixel_values=x)
        first_float(out).float().sum().backward()
        model.eval()
        with torch.inference_mode(), torch.autocast(DEV, dtype=torch.bfloat16):
            o2 = model(pixel_values=x)
        shp = tuple(first_float(o2).shape)
        print(f"OK {k} params {n} {h}x{w} out {shp}", flush=True)
    except Exception as e:
        tb = traceback.extract_tb(e.__traceback__)[-1]
        print(f"FAIL {k} {type(e).__name__}: {str(e)[:300]} @ {tb.filename}:{tb.lineno}", flush=True)
    model = out = None
    gc.collect()
