"""When does a process's glibc threshold rise past 3,846,144 bytes? CPython's interned-strings dict
frees its keys table of that size when it outgrows 2^18 slots (docs/driver-placement.md, rule 7,
session 42). One case per fresh process:

    python3 validation/va_interned/probe.py CASE      (CASE: a name in CASES; prints one JSON line)
    bash validation/va_interned/run.sh OUT.jsonl      (every case)

Each line: the case, `sys.getunicodeinternedsize()` where Python has it (3.12+), and for CPU tensors
of 1, 2, 2.25, 3 and 3.5 MiB made after the case's imports, whether glibc mapped each on its own
(the chunk header's IS_MMAPPED bit), which shows where the threshold stands."""

import ctypes
import json
import sys


def mapped(nbytes):
    import torch

    t = torch.empty(nbytes, dtype=torch.uint8)
    p = t.data_ptr()
    size = ctypes.c_size_t.from_address(p - 8).value
    return bool(size & 2)


def resnet50():
    import torchvision

    return torchvision.models.resnet50()


CASES = {
    "torch": "import torch",
    "torchvision": "import torch, torchvision",
    "torchvision_resnet50": "m = resnet50()",
    "timm": "import torch, timm",
    "timm_resnet50": "import timm; m = timm.create_model('resnet50')",
    "timm_vit": "import timm; m = timm.create_model('vit_base_patch16_224')",
    "transformers": "import torch, transformers",
    "transformers_config": "from transformers import GPT2Config",
    "transformers_gpt2": "from transformers import GPT2Config, GPT2LMHeadModel",
    "transformers_gpt2_model": (
        "from transformers import GPT2Config, GPT2LMHeadModel; m = GPT2LMHeadModel(GPT2Config(n_layer=2))"
    ),
    "transformers_optimization": "from transformers import get_cosine_schedule_with_warmup",
    "peft": "import peft",
    "dynamo": "import torch, torch._dynamo",
    "optimizer": "import torch; opt = torch.optim.AdamW([torch.nn.Parameter(torch.zeros(4))])",
    "torchvision_optimizer": "m = resnet50(); import torch; opt = torch.optim.SGD(m.parameters(), lr=0.1)",
    "torchaudio": "import torch, torchaudio",
    "torch_func": "import torch, torch.func",
    "torch_distributions": "import torch, torch.distributions",
}


def main():
    case = sys.argv[1]
    exec(CASES[case], {"resnet50": resnet50})
    out = {"case": case, "python": sys.version.split()[0]}
    if hasattr(sys, "getunicodeinternedsize"):
        out["interned"] = sys.getunicodeinternedsize()
    out["mapped"] = {str(n): mapped(n) for n in (1 << 20, 2 << 20, 2_359_296, 3 << 20, 3_670_016)}
    print(json.dumps(out))


if __name__ == "__main__":
    main()
