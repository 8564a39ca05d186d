"""A reproducible masked-LM pre-training run: the script sets CUBLAS_WORKSPACE_CONFIG=:16:8 in os.environ
at its top and calls torch.use_deterministic_algorithms(True) (with cudnn.benchmark off) before building
anything. transformers' BertForMaskedLM from a BertConfig (6 layers, hidden 768, 12 heads, intermediate
3072, vocab 30522, max positions 512, sdpa attention, no download). Inputs: token ids from a fixed CPU
generator, 15% of positions masked by a fixed CPU-drawn mask (labels -100 elsewhere), so no size follows
data values (the loss is over all positions, ignore_index). Each step is timed with a pair of
torch.cuda.Event(enable_timing=True) and elapsed_time after an event synchronize.

Phases: 5 training steps at batch 32 x 256 under fp16 autocast with a GradScaler and AdamW (foreach),
linear warm-up via LambdaLR; 3 steps at batch 16 x 512 inside torch.profiler.profile(activities=[CPU,
CUDA], record_shapes=True, profile_memory=True), the profiler's key_averages() read after it; an
inference_mode fill-mask pass at batch 64 x 128 in fp16 autocast (logits at the masked positions taken
with a fixed index tensor, top-5). 3 phases."""

import os

os.environ["CUBLAS_WORKSPACE_CONFIG"] = ":16:8"

import torch
from torch.profiler import ProfilerActivity, profile
from transformers import BertConfig, BertForMaskedLM

torch.use_deterministic_algorithms(True)
torch.backends.cudnn.benchmark = False
torch.manual_seed(2326)
device = "cuda"
VOCAB = 30522


def report(tag):
    print(f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
          f"reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()


def make_batch(g, b, s):
    ids = torch.randint(1000, VOCAB, (b, s), generator=g)
    masked = torch.rand(b, s, generator=g) < 0.15
    labels = torch.where(masked, ids, torch.full_like(ids, -100))
    ids = torch.where(masked, torch.full_like(ids, 103), ids)
    return ids.to(device), labels.to(device), torch.ones(b, s, dtype=torch.long).to(device)


def main():
    cfg = BertConfig(num_hidden_layers=6, hidden_size=768, num_attention_heads=12, intermediate_size=3072,
                     vocab_size=VOCAB, max_position_embeddings=512, attn_implementation="sdpa")
    model = BertForMaskedLM(cfg).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.01, foreach=True)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda step: min(1.0, (step + 1) / 4))
    scaler = torch.amp.GradScaler("cuda")
    g = torch.Generator().manual_seed(21)

    def step(b, s):
        ids, labels, attn = make_batch(g, b, s)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        with torch.autocast("cuda", dtype=torch.float16):
            loss = model(input_ids=ids, attention_mask=attn, labels=labels).loss
        scaler.scale(loss).backward()
        scaler.unscale_(opt)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        scaler.step(opt)
        scaler.update()
        opt.zero_grad(set_to_none=True)
        sched.step()
        end.record()
        end.synchronize()
        return float(loss), start.elapsed_time(end)

    model.train()
    for _ in range(5):
        loss, ms = step(32, 256)
    print("loss", loss, "timed", ms >= 0)
    report("train_deterministic_b32x256")

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], record_shapes=True,
                 profile_memory=True) as prof:
        for _ in range(3):
            step(16, 512)
    print("profiled ops", len(prof.key_averages()))
    report("profiled_b16x512")

    model.eval()
    with torch.inference_mode():
        ids, labels, attn = make_batch(g, 64, 128)
        pos = torch.arange(0, 128, 8).to(device)
        with torch.autocast("cuda", dtype=torch.float16):
            hidden = model.bert(input_ids=ids, attention_mask=attn).last_hidden_state
            logits = model.cls(hidden.index_select(1, pos))
        top5 = logits.float().softmax(-1).topk(5, dim=-1).indices
        print("fill-mask", tuple(top5.shape))
    report("fill_mask_b64x128")


if __name__ == "__main__":
    main()
