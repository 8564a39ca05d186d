"""A vLLM-style engine on one GPU, tensor-parallel size 1: `init_process_group('nccl',
device_id=cuda:0)` (the communicator made at once) with rank 0 of 1 and MASTER_ADDR/PORT set by the
script; an activation workspace of 1/1000 of the free memory `torch.cuda.mem_get_info()` reports right
after the group starts; a Llama-style decoder (8 layers, d 2048, 16 heads with 4 KV heads of 128,
SwiGLU 5632, vocab 32000) in bf16 on the GPU whose row-parallel outputs (attention output and MLP
down projection) are all-reduced over the group as a tensor-parallel engine does; a profile run of one
prefill of 4 x 1024 tokens; then the paged KV cache sized from the free memory after the profile run
(3% of it, in blocks of 16 tokens x 8 layers x K and V), as `gpu_memory_utilization` does; then 64
greedy decode steps of 8 sequences writing into the cache's blocks and attending over them. 4 phases.

NCCL's own buffers are outside the caching allocator, so the workspace's and the cache's sizes carry
what the driver has given NCCL by then."""

import os
import socket

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

with socket.socket() as s:
    s.bind(("localhost", 0))
    os.environ["MASTER_PORT"] = str(s.getsockname()[1])
os.environ.update(MASTER_ADDR="localhost", RANK="0", WORLD_SIZE="1", LOCAL_RANK="0")
torch.cuda.set_device(0)
dist.init_process_group("nccl", device_id=torch.device("cuda", 0))

torch.manual_seed(2486)
V, D, H, KVH, HD, FF, L = 32000, 2048, 16, 4, 128, 5632, 8
BLOCK = 16
DT = torch.bfloat16


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


free0, total = torch.cuda.mem_get_info()
workspace = torch.empty(free0 // 1000, dtype=torch.uint8, device="cuda")
print("free after init", free0, "workspace", workspace.numel())
report("group_and_workspace")


class Layer(nn.Module):
    def __init__(self):
        super().__init__()
        self.n1, self.n2 = nn.RMSNorm(D), nn.RMSNorm(D)
        self.qkv = nn.Linear(D, (H + 2 * KVH) * HD, bias=False)
        self.o = nn.Linear(H * HD, D, bias=False)
        self.gate_up = nn.Linear(D, 2 * FF, bias=False)
        self.down = nn.Linear(FF, D, bias=False)

    def mlp(self, h):
        g, u = self.gate_up(h).chunk(2, dim=-1)
        out = self.down(F.silu(g) * u)
        dist.all_reduce(out)
        return out

    def prefill(self, x):
        b, t, _ = x.shape
        q, k, v = self.qkv(self.n1(x)).split([H * HD, KVH * HD, KVH * HD], dim=-1)
        q = q.view(b, t, H, HD).transpose(1, 2)
        k = k.view(b, t, KVH, HD).transpose(1, 2)
        v = v.view(b, t, KVH, HD).transpose(1, 2)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        out = self.o(a.transpose(1, 2).reshape(b, t, H * HD))
        dist.all_reduce(out)
        x = x + out
        return x + self.mlp(self.n2(x))

    def decode(self, x, kc, vc, tables, pos):
        # x: (b, 1, D); kc/vc: (blocks, BLOCK, KVH, HD); tables: (b, max_blocks) block ids
        b = x.shape[0]
        q, k, v = self.qkv(self.n1(x)).split([H * HD, KVH * HD, KVH * HD], dim=-1)
        blk, off = tables[:, pos // BLOCK], pos % BLOCK
        kc[blk, off] = k.view(b, KVH, HD)
        vc[blk, off] = v.view(b, KVH, HD)
        n = (pos // BLOCK) + 1
        keys = kc[tables[:, :n]].view(b, n * BLOCK, KVH, HD)[:, : pos + 1].transpose(1, 2)
        vals = vc[tables[:, :n]].view(b, n * BLOCK, KVH, HD)[:, : pos + 1].transpose(1, 2)
        a = F.scaled_dot_product_attention(q.view(b, 1, H, HD).transpose(1, 2), keys, vals, enable_gqa=True)
        out = self.o(a.transpose(1, 2).reshape(b, 1, H * HD))
        dist.all_reduce(out)
        x = x + out
        return x + self.mlp(self.n2(x))


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(V, D)
        self.layers = nn.ModuleList(Layer() for _ in range(L))
        self.norm = nn.RMSNorm(D)
        self.lm_head = nn.Linear(D, V, bias=False)


model = Model().to(device="cuda", dtype=DT).eval()
with torch.inference_mode():
    x = model.emb(torch.randint(0, V, (4, 1024), device="cuda"))
    for layer in model.layers:
        x = layer.prefill(x)
    logits = model.lm_head(model.norm(x[:, -1]))
    del x, logits
torch.cuda.synchronize()
report("load_and_profile_prefill")

free1, _ = torch.cuda.mem_get_info()
block_bytes = BLOCK * KVH * HD * 2  # one K or V block of one layer, bf16
num_blocks = int(free1 * 0.03) // (2 * L * block_bytes)
k_cache = [torch.zeros(num_blocks, BLOCK, KVH, HD, dtype=DT, device="cuda") for _ in range(L)]
v_cache = [torch.zeros(num_blocks, BLOCK, KVH, HD, dtype=DT, device="cuda") for _ in range(L)]
print("free after profile", free1, "kv blocks", num_blocks)
report("kv_cache_from_free_memory")

B, STEPS = 8, 64
per_seq = (STEPS + BLOCK - 1) // BLOCK
tables = torch.arange(B * per_seq, device="cuda").view(B, per_seq)
tok = torch.randint(0, V, (B, 1), device="cuda")
with torch.inference_mode():
    for pos in range(STEPS):
        x = model.emb(tok)
        for i, layer in enumerate(model.layers):
            x = layer.decode(x, k_cache[i], v_cache[i], tables, pos)
        tok = model.lm_head(model.norm(x)).argmax(-1)
        del x
report("paged_decode_64_steps")

dist.destroy_process_group()
