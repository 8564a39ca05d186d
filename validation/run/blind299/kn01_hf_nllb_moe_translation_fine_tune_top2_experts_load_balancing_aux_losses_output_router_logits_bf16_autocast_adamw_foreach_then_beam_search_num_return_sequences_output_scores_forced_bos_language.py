"""Translation fine-tune of a sparse mixture-of-experts encoder-decoder: an NllbMoeForConditionalGeneration
from NllbMoeConfig (6 encoder + 6 decoder layers of 512, 8 heads, every second layer a top-2 router over 8
experts of 2048 with expert capacity 64, the rest dense FFNs of 2048, vocabulary 32,000 with language codes),
trained with `output_router_logits=True` so the loss carries the encoder and decoder load-balancing aux
losses, under bf16 autocast with fp32 master weights and AdamW(foreach=True), clip_grad_norm_.

Phases: (1) model build + first step; (2) three more steps at batch 24, source 96 / target 80 tokens with
right padding; (3) teacher-forced validation loss under no_grad with the router logits; (4) beam search
(4 beams, 2 returned sequences each) with `forced_bos_token_id` for the target language, `output_scores`
and `return_dict_in_generate`, sequence scores read back. 4 phases."""

import os

import torch
from transformers import NllbMoeConfig, NllbMoeForConditionalGeneration

os.environ.setdefault("HF_HUB_OFFLINE", "1")
SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(29901)
common = dict(
    pad_token_id=1,
    bos_token_id=0,
    eos_token_id=2,
    decoder_start_token_id=2,
    router_z_loss_coef=0.001,
    router_aux_loss_coef=0.001,
    dropout=0.1,
    encoder_sparse_step=2,
    decoder_sparse_step=2,
)
if SMALL:
    cfg = NllbMoeConfig(
        vocab_size=512,
        d_model=64,
        encoder_layers=2,
        decoder_layers=2,
        encoder_attention_heads=4,
        decoder_attention_heads=4,
        encoder_ffn_dim=128,
        decoder_ffn_dim=128,
        num_experts=4,
        expert_capacity=8,
        max_position_embeddings=256,
        **common,
    )
    B, SRC, TGT, VB, BEAM_B, NEW = 2, 16, 12, 2, 2, 4
else:
    cfg = NllbMoeConfig(
        vocab_size=32000,
        d_model=512,
        encoder_layers=6,
        decoder_layers=6,
        encoder_attention_heads=8,
        decoder_attention_heads=8,
        encoder_ffn_dim=2048,
        decoder_ffn_dim=2048,
        num_experts=8,
        expert_capacity=64,
        max_position_embeddings=1024,
        **common,
    )
    B, SRC, TGT, VB, BEAM_B, NEW = 24, 96, 80, 32, 8, 40
LANG_SRC, LANG_TGT = cfg.vocab_size - 2, cfg.vocab_size - 1  # the last two ids play language codes
device = "cuda" if torch.cuda.is_available() else "cpu"


def report(tag):
    if device == "cuda":
        print(
            f"{tag}: peak allocated {torch.cuda.max_memory_allocated()} "
            f"reserved {torch.cuda.memory_reserved()} allocated {torch.cuda.memory_allocated()}"
        )
        torch.cuda.reset_peak_memory_stats()


def batch(n):
    """Source and target: lang code + tokens + eos, right-padded; labels -100 on the target's padding."""
    src = torch.full((n, SRC), cfg.pad_token_id, dtype=torch.long)
    tgt = torch.full((n, TGT), cfg.pad_token_id, dtype=torch.long)
    for i in range(n):
        ls = int(torch.randint(SRC // 2, SRC + 1, ()).item())
        lt = int(torch.randint(TGT // 2, TGT + 1, ()).item())
        src[i, 0] = LANG_SRC
        src[i, 1 : ls - 1] = torch.randint(3, cfg.vocab_size - 2, (ls - 2,))
        src[i, ls - 1] = cfg.eos_token_id
        tgt[i, 0] = LANG_TGT
        tgt[i, 1 : lt - 1] = torch.randint(3, cfg.vocab_size - 2, (lt - 2,))
        tgt[i, lt - 1] = cfg.eos_token_id
    mask = (src != cfg.pad_token_id).long()
    labels = tgt.masked_fill(tgt == cfg.pad_token_id, -100)
    return src.to(device), mask.to(device), labels.to(device)


model = NllbMoeForConditionalGeneration(cfg).to(device)
model.train()
opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.01, foreach=True)

for step in range(4):
    src, mask, labels = batch(B)
    with torch.autocast(device_type=device, dtype=torch.bfloat16):
        out = model(input_ids=src, attention_mask=mask, labels=labels, output_router_logits=True)
    out.loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    opt.zero_grad(set_to_none=True)
    print(
        f"step {step} loss {out.loss.item():.4f} enc aux {out.encoder_aux_loss.item():.4f} "
        f"dec aux {out.decoder_aux_loss.item():.4f}"
    )
    del out
    if step == 0:
        report("build and first step")
report("moe training steps")

model.eval()
with torch.no_grad(), torch.autocast(device_type=device, dtype=torch.bfloat16):
    src, mask, labels = batch(VB)
    out = model(input_ids=src, attention_mask=mask, labels=labels, output_router_logits=True)
    print(f"validation loss {out.loss.item():.4f}")
    del out
report("validation")

with torch.no_grad():
    src, mask, _ = batch(BEAM_B)
    gen = model.generate(
        input_ids=src,
        attention_mask=mask,
        num_beams=4,
        num_return_sequences=2,
        max_new_tokens=NEW,
        min_new_tokens=NEW,
        forced_bos_token_id=LANG_TGT,
        output_scores=True,
        return_dict_in_generate=True,
    )
    print(
        f"beams {tuple(gen.sequences.shape)} scores {len(gen.scores)} "
        f"best {gen.sequences_scores.max().item():.3f}"
    )
    del gen
report("beam search")
if device == "cuda":
    print(f"final allocated {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
