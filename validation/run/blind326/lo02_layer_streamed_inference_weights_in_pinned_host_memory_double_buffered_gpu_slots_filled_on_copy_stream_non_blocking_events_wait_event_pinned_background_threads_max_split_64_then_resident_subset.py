"""Layer-streamed inference of a decoder too big to keep resident (the FlexGen / accelerate
"offload" idiom, written by hand): the weights of 16 pre-LN transformer blocks (fp16, 1,536 wide,
SwiGLU MLP) live in pinned host memory (`pin_memory()`); two preallocated sets of GPU weight slots are
filled alternately on a copy stream with `copy_(..., non_blocking=True)` while the compute stream runs
the previous block, synchronized with CUDA events (`record_event` / `wait_event`, and the copy stream
waits for the compute stream's event before it overwrites a slot). The allocator is configured before
torch is imported with `PYTORCH_CUDA_ALLOC_CONF="pinned_use_background_threads:True,max_split_size_mb:64"`.
Then the slots are dropped (`empty_cache`) and the first four blocks are made resident with
`.to("cuda", non_blocking=True)` for a short prefix pass.

Phases: 0 host weights pinned, GPU slots and embeddings allocated; 1 streamed forward over a batch of
4 x 1,024 tokens; 2 streamed forward over 16 x 512 tokens; 3 slots freed, four blocks resident,
prefix pass over 8 x 1,024 tokens."""

import os

os.environ["PYTORCH_CUDA_ALLOC_CONF"] = "pinned_use_background_threads:True,max_split_size_mb:64"

import torch
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(3262)
device = "cuda" if torch.cuda.is_available() else "cpu"
if SMALL:
    V, D, FF, H, L = 512, 64, 128, 4, 4
    SHAPES = [(2, 32), (4, 16), (2, 32)]
else:
    V, D, FF, H, L = 32000, 1536, 4096, 12, 16
    SHAPES = [(4, 1024), (16, 512), (8, 1024)]
dt = torch.float16
NAMES = {
    "ln1": (D,),
    "wqkv": (3 * D, D),
    "wo": (D, D),
    "ln2": (D,),
    "wg": (FF, D),
    "wu": (FF, D),
    "wd": (D, FF),
}


def report(tag):
    if device == "cuda":
        print(
            f"{tag}: allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()} "
            f"reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()


def host_block():
    w = {}
    for name, shape in NAMES.items():
        t = torch.ones(shape, dtype=dt) if len(shape) == 1 else torch.randn(shape, dtype=dt) * 0.02
        w[name] = t.pin_memory() if device == "cuda" else t
    return w


def block(x, w):
    b, t, _ = x.shape
    h = F.rms_norm(x, (D,), w["ln1"])
    q, k, v = F.linear(h, w["wqkv"]).split(D, dim=-1)
    q, k, v = (z.view(b, t, H, D // H).transpose(1, 2) for z in (q, k, v))
    a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    x = x + F.linear(a.transpose(1, 2).reshape(b, t, D), w["wo"])
    h = F.rms_norm(x, (D,), w["ln2"])
    return x + F.linear(F.silu(F.linear(h, w["wg"])) * F.linear(h, w["wu"]), w["wd"])


host = [host_block() for _ in range(L)]
embed = (torch.randn(V, D, dtype=dt) * 0.02).to(device)
norm_f = torch.ones(D, dtype=dt, device=device)
slots = [{n: torch.empty(s, dtype=dt, device=device) for n, s in NAMES.items()} for _ in range(2)]
copy_stream = torch.cuda.Stream() if device == "cuda" else None
report("phase0 setup")


def fill(slot, i):
    for n in NAMES:
        slot[n].copy_(host[i][n], non_blocking=True)


def streamed_forward(idx):
    if device != "cuda":
        x = embed[idx]
        for i in range(L):
            fill(slots[0], i)
            x = block(x, slots[0])
        return F.rms_norm(x, (D,), norm_f) @ embed.t()
    compute = torch.cuda.current_stream()
    loaded = [torch.cuda.Event(), torch.cuda.Event()]
    used = [torch.cuda.Event(), torch.cuda.Event()]
    with torch.cuda.stream(copy_stream):
        fill(slots[0], 0)
        copy_stream.record_event(loaded[0])
    x = embed[idx]
    for i in range(L):
        cur = i % 2
        if i + 1 < L:
            nxt = 1 - cur
            with torch.cuda.stream(copy_stream):
                if i >= 1:
                    copy_stream.wait_event(used[nxt])
                fill(slots[nxt], i + 1)
                copy_stream.record_event(loaded[nxt])
        compute.wait_event(loaded[cur])
        x = block(x, slots[cur])
        compute.record_event(used[cur])
    return F.rms_norm(x, (D,), norm_f) @ embed.t()


with torch.inference_mode():
    for phase, (b, t) in enumerate(SHAPES[:2], start=1):
        idx = torch.randint(0, V, (b, t), device=device)
        logits = streamed_forward(idx)
        next_tok = logits[:, -1].argmax(-1)
        print("streamed", b, t, next_tok[:4].tolist())
        del logits, idx
        report(f"phase{phase} streamed {b}x{t}")

    slots.clear()
    if device == "cuda":
        torch.cuda.empty_cache()
    resident = [{n: w.to(device, non_blocking=True) for n, w in host[i].items()} for i in range(4)]
    b, t = SHAPES[2]
    idx = torch.randint(0, V, (b, t), device=device)
    x = embed[idx]
    for w in resident:
        x = block(x, w)
    print("prefix", x.float().norm().item())
    del x
    report("phase3 resident prefix")
