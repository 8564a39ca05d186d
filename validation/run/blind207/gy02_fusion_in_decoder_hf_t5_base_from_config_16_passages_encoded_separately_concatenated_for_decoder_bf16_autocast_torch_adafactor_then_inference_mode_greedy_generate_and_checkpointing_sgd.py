"""Fusion-in-Decoder (Izacard & Grave 2021) over a T5-base from config, on random tokens.

Each question comes with 16 retrieved passages; "question: ... context: ..." inputs of 192 tokens are
encoded separately by the T5 encoder as a batch of B x 16 sequences, the encoder outputs are
concatenated per question into one sequence of 16 x 192 = 3072 tokens, and the decoder cross-attends
to all of them (the FiD wrapper: encoder over (B*k, L), then a view (B, k*L, d)). Answers of 48 tokens.

Phases: the first step (bf16 autocast, torch.optim.Adafactor, batch 4 questions); 2 more steps;
inference_mode evaluation loss and greedy generation of 24 answer tokens from the fused encoder outputs
at batch 8 (min_new_tokens fixes the length); then gradient checkpointing (HF's, non-reentrant) with
SGD momentum in fp32 at batch 6. 4 phases."""

import os

import torch
from transformers import T5Config, T5ForConditionalGeneration
from transformers.modeling_outputs import BaseModelOutput

os.environ.setdefault("HF_HUB_OFFLINE", "1")
SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(2072)
if SMALL:
    cfg = T5Config(vocab_size=512, d_model=64, d_kv=16, d_ff=128, num_layers=2, num_heads=4)
    PASSAGES, PLEN, ALEN, BATCH, NEW = 4, 32, 8, 2, 4
else:
    cfg = T5Config(vocab_size=32128, d_model=768, d_kv=64, d_ff=3072, num_layers=12, num_heads=12)
    PASSAGES, PLEN, ALEN, BATCH, NEW = 16, 192, 48, 4, 24
cfg.decoder_start_token_id = 0
cfg.pad_token_id = 0
cfg.eos_token_id = 1
device = "cuda" if torch.cuda.is_available() else "cpu"
amp = device == "cuda"


def report(tag):
    if device == "cuda":
        print(
            f"{tag}: peak allocated {torch.cuda.max_memory_allocated()} "
            f"reserved {torch.cuda.memory_reserved()} allocated {torch.cuda.memory_allocated()}"
        )
        torch.cuda.reset_peak_memory_stats()


def make_batch(b):
    ids = torch.randint(2, cfg.vocab_size, (b, PASSAGES, PLEN), device=device)
    # passages are right-padded to PLEN: the last tokens of some passages are padding
    lengths = torch.randint(PLEN // 2, PLEN + 1, (b, PASSAGES), device=device)
    mask = torch.arange(PLEN, device=device) < lengths.unsqueeze(-1)
    ids = ids.masked_fill(~mask, cfg.pad_token_id)
    labels = torch.randint(2, cfg.vocab_size, (b, ALEN), device=device)
    return ids, mask.long(), labels


def fid_encode(model, ids, mask):
    b = ids.shape[0]
    out = model.encoder(input_ids=ids.view(b * PASSAGES, PLEN), attention_mask=mask.view(b * PASSAGES, PLEN))
    hidden = out.last_hidden_state.view(b, PASSAGES * PLEN, -1)
    return BaseModelOutput(last_hidden_state=hidden), mask.view(b, PASSAGES * PLEN)


def fid_loss(model, ids, mask, labels):
    enc, enc_mask = fid_encode(model, ids, mask)
    return model(encoder_outputs=enc, attention_mask=enc_mask, labels=labels).loss


model = T5ForConditionalGeneration(cfg).to(device)
print(f"params {sum(p.numel() for p in model.parameters()) / 1e6:.1f}M")
opt = torch.optim.Adafactor(model.parameters(), lr=1e-2)

model.train()
for step in range(3):
    ids, mask, labels = make_batch(BATCH)
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
        loss = fid_loss(model, ids, mask, labels)
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    print(f"step {step} loss {loss.item():.4f}")
    if step == 0:
        report("first step")
report("train")

model.eval()
with torch.inference_mode(), torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
    ids, mask, labels = make_batch(2 * BATCH)
    eval_loss = fid_loss(model, ids, mask, labels).item()
    enc, enc_mask = fid_encode(model, ids, mask)
    answers = model.generate(
        encoder_outputs=enc,
        attention_mask=enc_mask,
        max_new_tokens=NEW,
        min_new_tokens=NEW,
        do_sample=False,
        num_beams=1,
    )
print(f"eval loss {eval_loss:.4f} answers {tuple(answers.shape)}")
del enc, enc_mask, answers
report("eval and generate")

del opt
model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
model.train()
opt = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)
for step in range(2):
    ids, mask, labels = make_batch(BATCH + 2)
    loss = fid_loss(model, ids, mask, labels)
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    print(f"checkpointed fp32 step {step} loss {loss.item():.4f}")
report("checkpointed fp32 sgd")
if device == "cuda":
    print(f"final allocated {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
