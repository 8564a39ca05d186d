"""A GPT-2 language model from transformers 5.17 (`GPT2LMHeadModel` from a `GPT2Config`: 16 layers of 1,024,
16 heads, context 1,024, vocabulary 50,257, tied head; 254M parameters) fine-tuned in fp32 weights under bf16
autocast with HF gradient checkpointing (`use_reentrant=False`) at 2 x 1,024 tokens, on a card shared with
other jobs (`torch.cuda.set_per_process_memory_fraction` leaves it 4 GiB).

The forward and backward fit; the first `AdamW.step()` does not: the two moments (twice the weights) plus
the multi-tensor kernels' temporaries run out of memory inside the step. The user catches
`torch.OutOfMemoryError`, drops the gradients and the optimizer, runs `gc.collect()` and
`torch.cuda.empty_cache()`, and moves the optimizer to the host by hand: an fp32 master copy of every
parameter in pinned host memory, a pinned host buffer per gradient, a CPU `torch.optim.AdamW` over the
masters. Each step copies the gradients device-to-host with `non_blocking=True`, synchronizes, steps on the
CPU and copies the masters back with `non_blocking=True`. The loss is computed by hand from the logits and
the logits are `del`eted before `backward()` (only the fp32 log-softmax that cross-entropy saves stays).
Then the allocator is retuned at run time with `torch.cuda.memory._set_allocator_settings(
"max_split_size_mb:128,garbage_collection_threshold:0.6")` and training goes on over batches of varying
length.

Phases: 0 model; 1 forward/backward and the GPU AdamW step that runs out of memory, with the cleanup; 2 two
steps with the host optimizer at 2 x 1,024; 3 four steps at lengths 512, 896, 640, 1,024 after the runtime
allocator settings; 4 evaluation under `no_grad` at 4 x 1,024. Seeded."""

import gc
import os

import torch
import torch.nn.functional as F
from transformers import GPT2Config, GPT2LMHeadModel

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(349_04)
device = "cuda" if torch.cuda.is_available() else "cpu"
cuda = device == "cuda"
if SMALL:
    V, D, L, H, T, B, LENGTHS = 512, 64, 2, 4, 64, 2, (32, 56, 40, 64)
else:
    V, D, L, H, T, B, LENGTHS = 50257, 1024, 16, 16, 1024, 2, (512, 896, 640, 1024)
CAP_BYTES = 4 * 2**30


def report(tag):
    if cuda:
        s = torch.cuda.memory_stats()
        print(
            f"{tag}: max_memory_allocated {torch.cuda.max_memory_allocated()} "
            f"memory_allocated {torch.cuda.memory_allocated()} "
            f"max_memory_reserved {torch.cuda.max_memory_reserved()} "
            f"memory_reserved {torch.cuda.memory_reserved()} num_ooms {s.get('num_ooms', 0)}"
        )
        torch.cuda.reset_peak_memory_stats()
    else:
        print(f"{tag}: (cpu)")


if cuda:
    total = torch.cuda.get_device_properties(0).total_memory
    torch.cuda.set_per_process_memory_fraction(CAP_BYTES / total)

config = GPT2Config(
    vocab_size=V,
    n_positions=T,
    n_embd=D,
    n_layer=L,
    n_head=H,
    attn_implementation="sdpa",
    use_cache=False,
)
model = GPT2LMHeadModel(config).to(device)
model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
model.train()
print(f"{sum(p.numel() for p in model.parameters()) / 1e6:.1f}M parameters")
report("GPT-2 16 x 1024 in fp32")


def lm_loss(ids):
    with torch.autocast(device, dtype=torch.bfloat16):
        logits = model(input_ids=ids).logits
    loss = F.cross_entropy(logits[:, :-1].float().reshape(-1, V), ids[:, 1:].reshape(-1))
    del logits
    return loss


optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.01)
oom = False
try:
    ids = torch.randint(0, V, (B, T), device=device)
    loss = lm_loss(ids)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    print("the GPU AdamW step fit")
except torch.OutOfMemoryError as e:
    print(f"OOM: {str(e).splitlines()[0][:90]}")
    oom = True
if oom:
    model.zero_grad(set_to_none=True)
    del optimizer
    loss = None
    gc.collect()
    if cuda:
        torch.cuda.empty_cache()
        allocated, reserved = torch.cuda.memory_allocated(), torch.cuda.memory_reserved()
        print(f"after cleanup: allocated {allocated} reserved {reserved}")
report("GPU AdamW step: OOM caught, optimizer dropped, cleanup")

gpu_params = [p for p in model.parameters() if p.requires_grad]
pin = cuda
masters = [p.detach().to("cpu", copy=True) for p in gpu_params]
grad_bufs = [torch.empty(p.shape, dtype=torch.float32) for p in gpu_params]
if pin:
    masters = [m.pin_memory() for m in masters]
    grad_bufs = [g.pin_memory() for g in grad_bufs]
for m in masters:
    m.requires_grad_(True)
cpu_optimizer = torch.optim.AdamW(masters, lr=1e-4, weight_decay=0.01, foreach=False)


def host_step():
    torch.nn.utils.clip_grad_norm_(gpu_params, 1.0)
    for p, buf in zip(gpu_params, grad_bufs, strict=True):
        buf.copy_(p.grad, non_blocking=True)
    if cuda:
        torch.cuda.synchronize()
    for m, buf in zip(masters, grad_bufs, strict=True):
        m.grad = buf
    for p in gpu_params:
        p.grad = None
    cpu_optimizer.step()
    with torch.no_grad():
        for p, m in zip(gpu_params, masters, strict=True):
            p.copy_(m, non_blocking=True)


for step in range(2):
    ids = torch.randint(0, V, (B, T), device=device)
    loss = lm_loss(ids)
    loss.backward()
    host_step()
    print(f"host-optimizer step {step}: loss {loss.item():.3f}")
report("AdamW on the host, pinned masters and gradient buffers, logits deleted before backward")

if cuda:
    torch.cuda.memory._set_allocator_settings("max_split_size_mb:128,garbage_collection_threshold:0.6")
for step, t in enumerate(LENGTHS):
    ids = torch.randint(0, V, (B, t), device=device)
    loss = lm_loss(ids)
    loss.backward()
    host_step()
    print(f"length {t} step {step}: loss {loss.item():.3f}")
report("runtime max_split_size_mb:128 garbage_collection_threshold:0.6, variable lengths")

model.eval()
with torch.no_grad():
    ids = torch.randint(0, V, (2 * B, T), device=device)
    val = lm_loss(ids)
print(f"eval loss {val.item():.3f}")
report("evaluation under no_grad at 4 x 1024")
