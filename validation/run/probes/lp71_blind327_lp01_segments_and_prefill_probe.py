"""Session 71 (helper lp): blind327/lp01 on the H100 missed by +20,971,520 reserved from its first packed
step on (one 20 MiB segment the twin has and the GPU did not) and by +3,840,000 peak allocated in phase 3
(merge_and_unload + static-cache generate; the twin's peak is in the prefill forward). This is lp01 as is
(its full sizes, plain `python3`, < 60 s, ~5 GB) with the caching allocator's memory history recorded
around the first packed step (every segment_alloc: its size, the allocation that made it, its index among
the step's allocations and the Python frames; the large pool's segments and free blocks of 1 MiB or more
before the step, at layers 0 and 7 and before layer 7's up_proj lora_A, and before generate) and around
generate() (the alloc/free events up to the peak, and the large allocations with their frames). The twin
prints the same lines.
"""

import torch
from peft import LoraConfig, get_peft_model
from peft.tuners.lora import LoraGAConfig
from peft.tuners.lora.loraga import preprocess_loraga
from transformers import Qwen3Config, Qwen3ForCausalLM

SMALL = False
torch.manual_seed(3271)
if SMALL:
    config = Qwen3Config(
        vocab_size=512,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
    )
    MB, MS, ROWS, PACK, G, PL, NEW = 2, 32, 2, 96, 2, 12, 4
else:
    config = Qwen3Config(
        vocab_size=32000,
        hidden_size=1024,
        intermediate_size=3072,
        num_hidden_layers=8,
        num_attention_heads=16,
        num_key_value_heads=8,
        head_dim=64,
        max_position_embeddings=4096,
    )
    MB, MS, ROWS, PACK, G, PL, NEW = 4, 512, 2, 2048, 6, 160, 48
config.tie_word_embeddings = False
config.pad_token_id, config.bos_token_id, config.eos_token_id = 0, 1, 2
config._attn_implementation = "sdpa"
device = "cuda" if torch.cuda.is_available() else "cpu"


def frames(e):
    out = []
    for f in e.get("frames", []):
        fn = f.get("filename", "")
        if fn.endswith(".py") and "/torch/" not in fn:
            out.append(f"{'/'.join(fn.split('/')[-2:])}:{f.get('line')}:{f.get('name')}")
        if len(out) == 3:
            break
    return " < ".join(out)


def start_history():
    torch.cuda.synchronize()
    torch.cuda.memory._record_memory_history(max_entries=1000000)


def stop_history():
    torch.cuda.synchronize()
    snap = torch.cuda.memory._snapshot()
    torch.cuda.memory._record_memory_history(enabled=None)
    return snap["device_traces"][0]


def report(tag):
    if device == "cuda":
        print(
            f"{tag}: allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()} "
            f"reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()


model = Qwen3ForCausalLM(config).to(device=device, dtype=torch.bfloat16)
lora_config = LoraConfig(
    r=16,
    lora_alpha=32,
    lora_dropout=0.0,
    target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
    init_lora_weights="lora_ga",
    lora_ga_config=LoraGAConfig(direction="ArB2r", scale="stable", stable_gamma=16),
)
calib = [torch.randint(3, config.vocab_size, (MB, MS)) for _ in range(2)]


def train_step():
    for ids in calib:
        ids = ids.to(device)
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()


preprocess_loraga(model, lora_config, train_step)
model = get_peft_model(model, lora_config)
for p in model.parameters():
    if p.requires_grad:
        p.data = p.data.float()
params = [p for p in model.parameters() if p.requires_grad]
print("trainable", sum(p.numel() for p in params), "tensors", len(params))
optimizer = torch.optim.AdamW(params, lr=2e-4, weight_decay=0.0, fused=device == "cuda")
report("loraga_init")


def packed_batch(gen):
    ids = torch.empty(ROWS, PACK, dtype=torch.long)
    pos = torch.empty(ROWS, PACK, dtype=torch.long)
    labels = torch.empty(ROWS, PACK, dtype=torch.long)
    for r in range(ROWS):
        at = 0
        while at < PACK:
            n = min(int(torch.randint(PACK // 16, PACK // 3, (1,), generator=gen)), PACK - at)
            ids[r, at : at + n] = torch.randint(3, config.vocab_size, (n,), generator=gen)
            pos[r, at : at + n] = torch.arange(n)
            labels[r, at : at + n] = ids[r, at : at + n]
            labels[r, at] = -100
            at += n
    return ids, pos, labels


def free_blocks(tag):
    free, segs = [], []
    for seg in torch.cuda.memory._snapshot()["segments"]:
        if seg["segment_type"] != "large":
            continue
        segs.append(seg["total_size"])
        free += [b["size"] for b in seg["blocks"] if b["state"] == "inactive" and b["size"] >= 1048576]
    free.sort(reverse=True)
    print(
        f"{tag}: allocated {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()} "
        f"large segments {sorted(segs, reverse=True)} free blocks >= 1 MiB {free}"
    )


hooked = []


def once(tag):
    def hook(module, args):
        if tag not in hooked:
            hooked.append(tag)
            free_blocks(tag)

    return hook


layers = model.base_model.model.model.layers
handles = [
    layers[0].register_forward_pre_hook(once("free at layer 0")),
    layers[7].register_forward_pre_hook(once("free at layer 7")),
    layers[7].mlp.up_proj.lora_A["default"].register_forward_pre_hook(once("free at layer 7 up_proj lora_A")),
]
free_blocks("free before step 0")
gen = torch.Generator().manual_seed(11)
model.train()
for step in range(3):
    if step == 0:
        start_history()
    ids, pos, labels = packed_batch(gen)
    with torch.autocast(device_type=device, dtype=torch.bfloat16):
        out = model(input_ids=ids.to(device), position_ids=pos.to(device), labels=labels.to(device))
    out.loss.backward()
    torch.nn.utils.clip_grad_norm_(params, 1.0)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    print(f"step {step} docs {int((pos == 0).sum())} loss {out.loss.item():.4f}")
    del out
    if step == 0:
        for h in handles:
            h.remove()
        trace = stop_history()
        n_alloc = sum(e["action"] == "alloc" for e in trace)
        for i, e in enumerate(trace):
            if e["action"] == "segment_alloc":
                nxt = next((x for x in trace[i + 1 :] if x["action"] == "alloc"), None)
                k = sum(x["action"] == "alloc" for x in trace[:i])
                print(
                    f"step0 segment {e['size']} for alloc {nxt and nxt['size']} #{k} at {nxt and frames(nxt)}"
                )
        print(f"step0 allocs {n_alloc} reserved {torch.cuda.memory_reserved()}")
        ev, k = [], 0
        for e in trace:
            if e["action"] == "alloc":
                k += 1
                if k > 960:
                    break
                ev.append(f"+{e['size']}")
            elif e["action"] == "free_requested":
                ev.append(f"-{e['size']}")
        print("step0 events to the 960th alloc: " + " ".join(ev))
        report("packed_step0")
report("packed_steps1-2")

del optimizer, params
merged = model.merge_and_unload()
merged.eval()
prompts = torch.randint(3, config.vocab_size, (G, PL))
plen = torch.linspace(PL // 3, PL, G).long()
attn = (torch.arange(PL)[None, :] >= (PL - plen)[:, None]).long()
prompts = prompts * attn
free_blocks("free before generate")
torch.cuda.synchronize()
base = torch.cuda.memory_allocated()
torch.cuda.reset_peak_memory_stats()
start_history()
with torch.no_grad():
    seqs = merged.generate(
        input_ids=prompts.to(device),
        attention_mask=attn.to(device),
        cache_implementation="static",
        disable_compile=True,
        max_new_tokens=NEW,
        min_new_tokens=NEW,
        do_sample=False,
        pad_token_id=0,
        eos_token_id=2,
    )
trace = stop_history()
cur, best, at, ev = 0, 0, 0, []
for e in trace:
    if e["action"] == "alloc":
        cur += e["size"]
        ev.append(f"+{e['size']}")
    elif e["action"] == "free_requested":
        cur -= e["size"]
        ev.append(f"-{e['size']}")
    else:
        continue
    if cur > best:
        best, at = cur, len(ev)
print(f"generate peak_above {torch.cuda.max_memory_allocated() - base} events_to_peak {at} of {len(ev)}")
print("generate events to peak: " + " ".join(ev[:at]))
big = [e for e in trace if e["action"] == "alloc" and e["size"] >= 65536]
for e in big[:80]:
    print(f"generate alloc {e['size']} at {frames(e)}")
print("generated", tuple(seqs.shape))
report("merged_static_generate")
