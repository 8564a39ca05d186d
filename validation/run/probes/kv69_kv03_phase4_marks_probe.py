"""Probe (session 69, helper kv): blind307/kv03 with memory_stats marks through phase 4.

blind307/kv03 (ImageGPT next-pixel pretraining, top-k completion, then a frozen linear probe) as
committed, with `MARK` lines (allocated, requested, inactive split bytes, segments, large/small pool
allocated) after each step of phase 4, where the H100 read 1,048,576 bytes less allocated than the twin
with requested equal (run_blind307_h100.jsonl). SNAP=PATH records the memory history and dumps a
snapshot to PATH at the end (the allocator's behaviour is unchanged by recording); with SNAP_SEGMENTS=1 the
history keeps only the segment events (cudaMalloc/cudaFree) of the whole run."""

import os

import torch
from transformers import ImageGPTConfig, ImageGPTForCausalImageModeling, ImageGPTForImageClassification

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(3073)
if SMALL:
    config = ImageGPTConfig(vocab_size=17, n_positions=64, n_embd=32, n_layer=2, n_head=4)
    SIDE, B, GEN_B, NEW, PROBE_B, EVAL_B = 8, 2, 2, 8, 4, 8
else:
    config = ImageGPTConfig(vocab_size=513, n_positions=1024, n_embd=512, n_layer=24, n_head=8)
    SIDE, B, GEN_B, NEW, PROBE_B, EVAL_B = 32, 24, 16, 256, 64, 128
config.reorder_and_upcast_attn = True
config.scale_attn_by_inverse_layer_idx = True
config.num_labels = 10
SOS = config.vocab_size - 1
device = "cuda" if torch.cuda.is_available() else "cpu"
SNAP = os.environ.get("SNAP")  # a path: record the memory history and dump a snapshot there at the end
if SNAP and device == "cuda" and os.environ.get("SNAP_SEGMENTS"):
    # the whole run's segment events only (cudaMalloc/cudaFree), with the Python stack of each
    torch.cuda.memory._record_memory_history(
        context="alloc", stacks="python", skip_actions=["alloc", "free_requested", "free_completed"]
    )
elif SNAP and device == "cuda":
    torch.cuda.memory._record_memory_history(max_entries=200000, stacks="python")


def report(tag):
    if device == "cuda":
        print(
            f"{tag}: allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()} "
            f"reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()


def mark(tag):
    if device == "cuda":
        torch.cuda.synchronize()
        s = torch.cuda.memory_stats()
        keys = (
            "allocated_bytes.all.current",
            "requested_bytes.all.current",
            "inactive_split_bytes.all.current",
            "segment.all.current",
            "allocated_bytes.large_pool.current",
            "allocated_bytes.small_pool.current",
        )
        print(f"MARK {tag}: " + " ".join(f"{k.split('.')[0]}.{k.split('.')[1]} {s[k]}" for k in keys))


def images(n):
    """Colour-cluster sequences with the SOS token in front (the last pixel is only a target)."""
    pixels = torch.randint(0, SOS, (n, SIDE * SIDE))
    return torch.cat([torch.full((n, 1), SOS), pixels[:, :-1]], dim=1).to(device), pixels.to(device)


model = ImageGPTForCausalImageModeling(config).to(device)
model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": True})
optimizer = torch.optim.Adam(model.parameters(), lr=3e-4, betas=(0.9, 0.95), fused=device == "cuda")
scheduler = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=3e-4, total_steps=3, pct_start=0.34)
report("built")

model.train()
for step in range(3):
    inputs, _ = images(B)
    with torch.autocast(device_type=device, dtype=torch.bfloat16):
        out = model(input_ids=inputs, labels=inputs)
    out.loss.backward()
    optimizer.step()
    scheduler.step()
    optimizer.zero_grad(set_to_none=True)
    print(f"step {step} loss {out.loss.item():.4f}")
    del out, inputs
    if step == 0:
        report("step0")
report("steps1-2")

model.eval()
prompt, _ = images(GEN_B)
prompt = prompt[:, : SIDE * SIDE - NEW + 1]
with torch.inference_mode():
    completed = model.generate(
        input_ids=prompt,
        attention_mask=torch.ones_like(prompt),
        do_sample=True,
        top_k=40,
        max_new_tokens=NEW,
        min_new_tokens=NEW,
        pad_token_id=SOS,
        eos_token_id=None,
    )
pixels = completed[:, 1:].reshape(GEN_B, SIDE, SIDE)
print(f"completed {tuple(pixels.shape)} distinct clusters {pixels.cpu().unique().numel()}")
del completed, pixels, prompt
report("completion")

mark("p3end")
probe = ImageGPTForImageClassification(config).to(device)
mark("probe_built")
probe.transformer.load_state_dict(model.transformer.state_dict())
mark("loaded")
probe.transformer.requires_grad_(False)
del model, optimizer, scheduler
mark("old_freed")
head_opt = torch.optim.SGD(probe.score.parameters(), lr=0.1, momentum=0.9)
probe.train()
for _step in range(3):
    inputs, _ = images(PROBE_B)
    labels = torch.randint(0, config.num_labels, (PROBE_B,), device=device)
    with torch.autocast(device_type=device, dtype=torch.bfloat16):
        out = probe(input_ids=inputs, labels=labels)
    out.loss.backward()
    head_opt.step()
    head_opt.zero_grad(set_to_none=True)
    del out, inputs, labels
    mark(f"head_step{_step}")
probe.eval()
with torch.inference_mode(), torch.autocast(device_type=device, dtype=torch.bfloat16):
    inputs, _ = images(EVAL_B)
    labels = torch.randint(0, config.num_labels, (EVAL_B,), device=device)
    acc = (probe(input_ids=inputs).logits.argmax(-1) == labels).float().mean()
mark("evaluated")
del inputs, labels
mark("eval_inputs_freed")
print(f"probe accuracy {acc.item():.3f}")
report("probe")
if SNAP and device == "cuda":
    torch.cuda.memory._dump_snapshot(SNAP)
