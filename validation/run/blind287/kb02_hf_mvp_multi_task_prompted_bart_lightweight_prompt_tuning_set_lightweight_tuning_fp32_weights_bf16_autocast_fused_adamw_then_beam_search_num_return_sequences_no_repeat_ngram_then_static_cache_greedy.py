"""MVP (transformers 5.17's `MvpForConditionalGeneration`, the multi-task supervised pre-trained BART) built
from config with its task prompts on (`use_prompt=True`: per-layer key/value prompts of 100 positions made by
a two-layer MLP of width 800; in 5.17 `MvpModel` passes `use_prompt` to the encoder's `embed_tokens` slot, so
only the decoder's self- and cross-attention get them), d 1,024, 12 + 12 layers, vocabulary 50,267, tied
embeddings. Phase 1: MVP's lightweight tuning by hand (`set_lightweight_tuning()` asserts on the missing
encoder prompt: the whole model frozen but the decoder's two prompt modules), fp32 weights under bf16
autocast, fused AdamW on the trainable parameters only, 5 steps at batch 8 with 512-token sources and
128-token targets (labels padded with -100 after 96 tokens for half the batch). Phase 2: the full model
unfrozen for one more fused AdamW step (its optimizer rebuilt, all parameters). Phase 3: `generate()` by beam
search, 4 beams, `num_return_sequences=4`, `no_repeat_ngram_size=3`, `length_penalty=1.2`, 40 new tokens (min
== max) for 4 sources of 512 tokens, the encoder-decoder dynamic cache. Phase 4: greedy `generate()` with
`cache_implementation="static"`, 40 new tokens, batch 8. Seeded; no value-dependent sizes. 4 phases."""

import torch
from transformers import MvpConfig, MvpForConditionalGeneration

torch.manual_seed(2872)


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


cfg = MvpConfig(use_prompt=True, prompt_length=100, prompt_mid_dim=800, dropout=0.1)
model = MvpForConditionalGeneration(cfg).cuda()
model.requires_grad_(False)
model.model.decoder.self_attn_prompt.requires_grad_(True)
model.model.decoder.cross_attn_prompt.requires_grad_(True)
trainable = [p for p in model.parameters() if p.requires_grad]
print("params", sum(p.numel() for p in model.parameters()), "trainable", sum(p.numel() for p in trainable))
opt = torch.optim.AdamW(trainable, lr=5e-4, weight_decay=0.0, fused=True)


def batch(n, src, tgt):
    ids = torch.randint(3, cfg.vocab_size, (n, src), device="cuda")
    labels = torch.randint(3, cfg.vocab_size, (n, tgt), device="cuda")
    labels[n // 2 :, 96:] = -100
    return ids, labels


model.train()
for step in range(5):
    ids, labels = batch(8, 512, 128)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        out = model(input_ids=ids, attention_mask=torch.ones_like(ids), labels=labels)
    out.loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    print(step, round(out.loss.item(), 3))
del out
report("lightweight_prompt_tuning")

model.requires_grad_(True)
opt = torch.optim.AdamW(model.parameters(), lr=1e-5, fused=True)
ids, labels = batch(8, 512, 128)
with torch.autocast("cuda", dtype=torch.bfloat16):
    loss = model(input_ids=ids, attention_mask=torch.ones_like(ids), labels=labels).loss
loss.backward()
opt.step()
opt.zero_grad(set_to_none=True)
print("full step", round(loss.item(), 3))
del loss, opt
report("full_model_step")

model.eval()
src = torch.randint(3, cfg.vocab_size, (4, 512), device="cuda")
with torch.no_grad():
    beams = model.generate(
        input_ids=src,
        attention_mask=torch.ones_like(src),
        num_beams=4,
        num_return_sequences=4,
        no_repeat_ngram_size=3,
        length_penalty=1.2,
        max_new_tokens=40,
        min_new_tokens=40,
    )
print("beams", tuple(beams.shape))
del beams
report("beam_search")

src = torch.randint(3, cfg.vocab_size, (8, 512), device="cuda")
with torch.no_grad():
    greedy = model.generate(
        input_ids=src,
        attention_mask=torch.ones_like(src),
        cache_implementation="static",
        do_sample=False,
        max_new_tokens=40,
        min_new_tokens=40,
    )
print("static greedy", tuple(greedy.shape))
report("static_cache_greedy")
