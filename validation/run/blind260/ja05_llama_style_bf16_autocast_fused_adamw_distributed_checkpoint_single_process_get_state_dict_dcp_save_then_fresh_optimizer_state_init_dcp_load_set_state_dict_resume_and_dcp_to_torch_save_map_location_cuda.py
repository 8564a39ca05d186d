"""torch.distributed.checkpoint in one process, without a process group (DCP saves and loads "in a single
process"): a Llama-style decoder written by hand (d 1024, 10 blocks, RMSNorm, rotary, GQA 16/4 heads
through SDPA, SwiGLU 2816, vocab 32000, untied; fp32 weights) trained two steps under bf16 autocast by
fused AdamW at 8 x 1024. Its model and optimizer state come from `get_state_dict` (fully-qualified names)
and go to a directory by `dcp.save`. A fresh model and optimizer then ask `get_state_dict` for the state to
load into, which first initialises the optimizer's state by a step over zero gradients
(`_init_optim_state`); `dcp.load` reads the checkpoint into those GPU tensors in place, `set_state_dict`
puts it back, and training resumes for two steps. Last, `dcp_to_torch_save` turns the directory into one
torch.save file (through the host), which is read back with `torch.load(map_location="cuda")` into a third,
bf16 model for evaluation under no_grad.

No value-dependent sizes. 5 phases."""

import gc
import os
import tempfile
import warnings

import torch
import torch.distributed.checkpoint as dcp
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed.checkpoint.format_utils import dcp_to_torch_save
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

warnings.filterwarnings("ignore", message="torch.distributed is disabled")
torch.manual_seed(2605)
V, D, H, KV, L, F_, T, B = 32000, 1024, 16, 4, 10, 2816, 1024, 8
HD = D // H


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


def rotary(x, cos, sin):
    x1, x2 = x.chunk(2, dim=-1)
    return x * cos + torch.cat((-x2, x1), dim=-1) * sin


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.attn_norm, self.mlp_norm = nn.RMSNorm(D), nn.RMSNorm(D)
        self.q, self.k, self.v = (
            nn.Linear(D, D, bias=False),
            nn.Linear(D, KV * HD, bias=False),
            nn.Linear(D, KV * HD, bias=False),
        )
        self.o = nn.Linear(D, D, bias=False)
        self.gate, self.up, self.down = (
            nn.Linear(D, F_, bias=False),
            nn.Linear(D, F_, bias=False),
            nn.Linear(F_, D, bias=False),
        )

    def forward(self, x, cos, sin):
        b, t, _ = x.shape
        h = self.attn_norm(x)
        q = rotary(self.q(h).view(b, t, H, HD).transpose(1, 2), cos, sin)
        k = rotary(self.k(h).view(b, t, KV, HD).transpose(1, 2), cos, sin)
        v = self.v(h).view(b, t, KV, HD).transpose(1, 2)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        x = x + self.o(a.transpose(1, 2).reshape(b, t, D))
        h = self.mlp_norm(x)
        return x + self.down(F.silu(self.gate(h)) * self.up(h))


class Llama(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(V, D)
        self.blocks = nn.ModuleList(Block() for _ in range(L))
        self.norm = nn.RMSNorm(D)
        self.lm_head = nn.Linear(D, V, bias=False)
        inv = 1.0 / (10000 ** (torch.arange(0, HD, 2).float() / HD))
        freqs = torch.outer(torch.arange(T).float(), inv)
        emb = torch.cat((freqs, freqs), dim=-1)
        self.register_buffer("cos", emb.cos(), persistent=False)
        self.register_buffer("sin", emb.sin(), persistent=False)

    def forward(self, idx):
        t = idx.shape[1]
        x = self.embed(idx)
        cos, sin = self.cos[:t], self.sin[:t]
        for blk in self.blocks:
            x = blk(x, cos, sin)
        return self.lm_head(self.norm(x))


def build():
    model = Llama().cuda()
    return model, torch.optim.AdamW(model.parameters(), lr=2e-4, weight_decay=0.1, fused=True)


def train(model, opt, n):
    for _ in range(n):
        idx = torch.randint(0, V, (B, T), device="cuda")
        with torch.autocast("cuda", dtype=torch.bfloat16):
            logits = model(idx)
        loss = F.cross_entropy(logits.float().view(-1, V), idx.view(-1))
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        del logits, loss


tmp = tempfile.TemporaryDirectory()
ckpt_dir = os.path.join(tmp.name, "dcp_step2")

model, opt = build()
train(model, opt, 2)
report("train_bf16_autocast_fused_adamw_two_steps")

msd, osd = get_state_dict(model, opt)
dcp.save({"model": msd, "optim": osd}, checkpoint_id=ckpt_dir)
del msd, osd, model, opt
gc.collect()
torch.cuda.empty_cache()
report("get_state_dict_dcp_save_release")

model, opt = build()
msd, osd = get_state_dict(model, opt)
state = {"model": msd, "optim": osd}
dcp.load(state, checkpoint_id=ckpt_dir)
set_state_dict(model, opt, model_state_dict=state["model"], optim_state_dict=state["optim"])
del state, msd, osd
report("fresh_optimizer_state_init_dcp_load_set_state_dict")

train(model, opt, 2)
del model, opt
gc.collect()
torch.cuda.empty_cache()
report("resume_two_steps_release")

pt = os.path.join(tmp.name, "step2.pt")
dcp_to_torch_save(ckpt_dir, pt)
ckpt = torch.load(pt, map_location="cuda", weights_only=True)
model = Llama().to(device="cuda", dtype=torch.bfloat16)
model.load_state_dict(ckpt["model"])
del ckpt
model.eval()
with torch.no_grad():
    logits = model(torch.randint(0, V, (B, T), device="cuda"))
    del logits
report("dcp_to_torch_save_load_map_location_cuda_bf16_eval")
tmp.cleanup()
