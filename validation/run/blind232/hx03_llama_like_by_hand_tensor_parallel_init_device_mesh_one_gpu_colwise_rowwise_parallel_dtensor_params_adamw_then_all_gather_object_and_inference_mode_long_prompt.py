"""Tensor parallelism as torchtitan writes it, on a one-process NCCL group: the script sets RANK,
WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and MASTER_PORT (a free port), and init_device_mesh("cuda", (1,)) starts the group
itself. A Llama-like decoder written by hand (8 layers, d 1024, 16 heads of 64, SwiGLU 2816, RMSNorm,
rotary embeddings, vocab 32000, untied head) has every block parallelized with parallelize_module:
attention's wq/wk/wv ColwiseParallel and wo RowwiseParallel, the MLP's w1/w3 ColwiseParallel and w2
RowwiseParallel (heads are viewed with -1, as local heads are); the embeddings and head stay plain.
Parameters of the blocks are DTensors. Token ids come from a fixed CPU generator; sizes never follow data.

Phases: 4 fp32 training steps at batch 8 x 1024 (SDPA causal) with foreach AdamW (two parameter groups, DTensor
and plain parameters: a foreach op over both, as clip_grad_norm_ would make, raises in PyTorch); dist.all_gather_object of the losses and dist.broadcast_object_list of
an evaluation setting, then 2 training steps at batch 4 x 2048 under bf16 autocast; an inference_mode
forward at batch 2 x 4096 in bf16 autocast (last position's logits only). 3 phases."""

import os
import socket


def free_port():
    """A port no other process holds: the GPU call runs several copies of a script at once."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return str(s.getsockname()[1])


os.environ.setdefault("RANK", "0")
os.environ.setdefault("WORLD_SIZE", "1")
os.environ.setdefault("LOCAL_RANK", "0")
os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
os.environ.setdefault("MASTER_PORT", free_port())

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

torch.manual_seed(2323)
device = "cuda"
D, NH, HD, FF, VOCAB, LAYERS = 1024, 16, 64, 2816, 32000, 8


def report(tag):
    print(f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
          f"reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()


def rope(x, cos, sin):
    x1, x2 = x[..., : HD // 2], x[..., HD // 2:]
    return x * cos + torch.cat([-x2, x1], dim=-1) * sin


class Attention(nn.Module):
    def __init__(self):
        super().__init__()
        self.wq = nn.Linear(D, NH * HD, bias=False)
        self.wk = nn.Linear(D, NH * HD, bias=False)
        self.wv = nn.Linear(D, NH * HD, bias=False)
        self.wo = nn.Linear(NH * HD, D, bias=False)

    def forward(self, x, cos, sin):
        b, s, _ = x.shape
        q = self.wq(x).view(b, s, -1, HD).transpose(1, 2)
        k = self.wk(x).view(b, s, -1, HD).transpose(1, 2)
        v = self.wv(x).view(b, s, -1, HD).transpose(1, 2)
        q, k = rope(q, cos, sin), rope(k, cos, sin)
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.wo(o.transpose(1, 2).reshape(b, s, -1))


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.w1 = nn.Linear(D, FF, bias=False)
        self.w3 = nn.Linear(D, FF, bias=False)
        self.w2 = nn.Linear(FF, D, bias=False)

    def forward(self, x):
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.attn_norm, self.attn = nn.RMSNorm(D), Attention()
        self.ffn_norm, self.mlp = nn.RMSNorm(D), MLP()

    def forward(self, x, cos, sin):
        x = x + self.attn(self.attn_norm(x), cos, sin)
        return x + self.mlp(self.ffn_norm(x))


class Llama(nn.Module):
    def __init__(self):
        super().__init__()
        self.tok = nn.Embedding(VOCAB, D)
        self.layers = nn.ModuleList([Block() for _ in range(LAYERS)])
        self.norm = nn.RMSNorm(D)
        self.head = nn.Linear(D, VOCAB, bias=False)

    def forward(self, ids, last_only=False):
        s = ids.shape[1]
        t = torch.arange(s, device=ids.device, dtype=torch.float32)
        freqs = torch.outer(t, 1.0 / 10000 ** (torch.arange(0, HD, 2, device=ids.device) / HD))
        emb = torch.cat([freqs, freqs], dim=-1)
        cos, sin = emb.cos(), emb.sin()
        x = self.tok(ids)
        for layer in self.layers:
            x = layer(x, cos, sin)
        x = self.norm(x)
        return self.head(x[:, -1:] if last_only else x)


def main():
    mesh = init_device_mesh("cuda", (1,))
    model = Llama().to(device)
    plan = {"attn.wq": ColwiseParallel(), "attn.wk": ColwiseParallel(), "attn.wv": ColwiseParallel(),
            "attn.wo": RowwiseParallel(), "mlp.w1": ColwiseParallel(), "mlp.w3": ColwiseParallel(),
            "mlp.w2": RowwiseParallel()}
    for block in model.layers:
        parallelize_module(block, mesh, plan)
    from torch.distributed.tensor import DTensor

    sharded = [p for p in model.parameters() if isinstance(p, DTensor)]
    plain = [p for p in model.parameters() if not isinstance(p, DTensor)]
    opt = torch.optim.AdamW([{"params": sharded}, {"params": plain}], lr=2e-4, weight_decay=0.1, foreach=True)
    g = torch.Generator().manual_seed(5)

    def train_step(b, s, amp):
        ids = torch.randint(0, VOCAB, (b, s + 1), generator=g).to(device)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
            logits = model(ids[:, :-1])
            loss = F.cross_entropy(logits.flatten(0, 1).float(), ids[:, 1:].flatten())
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return float(loss)

    losses = [train_step(8, 1024, False) for _ in range(4)]
    report("tp_train_fp32_b8x1024")

    gathered = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, losses)
    setting = [{"batch": 2, "seq": 4096} if dist.get_rank() == 0 else None]
    dist.broadcast_object_list(setting, src=0)
    for _ in range(2):
        train_step(4, 2048, True)
    print("gathered", len(gathered[0]), "setting", setting[0])
    report("objects_then_bf16_b4x2048")

    model.eval()
    with torch.inference_mode(), torch.autocast("cuda", dtype=torch.bfloat16):
        ids = torch.randint(0, VOCAB, (setting[0]["batch"], setting[0]["seq"]), generator=g).to(device)
        nxt = model(ids, last_only=True).argmax(-1)
        print("next", tuple(nxt.shape))
    report("infer_b2x4096")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
