"""Neighbour probe (session 63, helper hf; run under `vramscope run --gpu h100 THIS NAME,NAME,...`): uncovered
transformers 5.17 causal-LM families, default configs cut to 2 layers, built on cuda in bf16: one training
step (forward + backward) at 1 x 64 and a 4-token greedy generate."""

import gc
import sys
import traceback

import torch
import transformers
from transformers import AutoConfig
from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES as C

NAMES = sys.argv[1].split(",")


torch.manual_seed(0)
for k in NAMES:
    cls = getattr(transformers, C[k])
    try:
        cfg = AutoConfig.for_model(k, num_hidden_layers=2)
        with torch.device("cuda"):
            model = cls._from_config(cfg, dtype=torch.bfloat16)
        n = sum(p.numel() for p in model.parameters())
        vocab = getattr(cfg.get_text_config(), "vocab_size", 1000) or 1000
        ids = torch.randint(5, min(vocab, 1000), (1, 64), device="cuda")
        model.train()
        out = model(input_ids=ids, labels=ids)
        out.loss.backward()
        model.eval()
        with torch.no_grad():
            g = model.generate(
                input_ids=ids[:, :16],
                attention_mask=torch.ones_like(ids[:, :16]),
                do_sample=False,
                max_new_tokens=4,
                min_new_tokens=4,
                pad_token_id=0,
                eos_token_id=None,
            )
        print(f"OK {k} params {n} gen {tuple(g.shape)} peak {torch.cuda.max_memory_allocated()}", flush=True)
    except Exception as e:
        tb = traceback.extract_tb(e.__traceback__)[-1]
        print(f"FAIL {k} {type(e).__name__}: {str(e)[:300]} @ {tb.filename}:{tb.lineno}", flush=True)
    model = out = None
    gc.collect()
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
