"""mBART-50 many-to-many translation fine-tuning (Tang et al. 2020) on an English -> German pair, an
MBartForConditionalGeneration built from an MBartConfig with no downloads, the sizes of
facebook/mbart-large-50-many-to-many-mmt: d_model 1,024, 12 encoder and 12 decoder layers, 16 heads, FFN
4,096, vocabulary 250,054 (language codes at the top: en_XX 250,004, de_DE 250,003), scaled embeddings,
pre-layer-norm with final layer norms, dropout 0.1. Sources "[en_XX] tokens </s>" and targets "[de_DE]
tokens </s>" of random lengths, right-padded on the host to the batch's longest (pad 1, labels -100, the
model's own MBart shift makes the decoder inputs). Pure bf16 training: the model cast with
.to(torch.bfloat16), torch.optim.AdamW (lr 5e-5, foreach by default, states in bf16) at batch 24 of up to
128 tokens each side: the first step its own phase, then 3 steps; then evaluation under
torch.inference_mode: the loss at batch 48; then the encoder run once on 48 sources and its outputs reused
by `generate()` twice: greedy with forced_bos_token_id de_DE (64 new tokens, min_new_tokens 64) on all 48,
and a 5-beam search on the first 12 (48 new tokens); 5 phases."""

import os

import torch
from transformers import MBartConfig, MBartForConditionalGeneration
from transformers.modeling_outputs import BaseModelOutput

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(18504)
if SMALL:
    D, FF, L, H, VOCAB = 64, 128, 2, 4, 1100
    B, STEPS, EVAL_B, BEAM_B, MAXLEN, GEN, BEAM_GEN = 2, 2, 4, 2, 24, 6, 4
else:
    D, FF, L, H, VOCAB = 1024, 4096, 12, 16, 250054
    B, STEPS, EVAL_B, BEAM_B, MAXLEN, GEN, BEAM_GEN = 24, 4, 48, 12, 128, 64, 48
device = "cuda" if torch.cuda.is_available() else "cpu"
BOS, PAD, EOS = 0, 1, 2
EN_XX, DE_DE = VOCAB - 50, VOCAB - 51

config = MBartConfig(
    vocab_size=VOCAB,
    d_model=D,
    encoder_layers=L,
    decoder_layers=L,
    encoder_attention_heads=H,
    decoder_attention_heads=H,
    encoder_ffn_dim=FF,
    decoder_ffn_dim=FF,
    max_position_embeddings=1024,
    dropout=0.1,
    attention_dropout=0.0,
    activation_function="relu",
    scale_embedding=True,
    pad_token_id=PAD,
    bos_token_id=BOS,
    eos_token_id=EOS,
    decoder_start_token_id=EOS,
    forced_eos_token_id=EOS,
)
model = MBartForConditionalGeneration(config).to(device=device, dtype=torch.bfloat16)
print(f"params {sum(p.numel() for p in model.parameters())}")


def translation_batch(bs):
    src_len = torch.randint(MAXLEN // 3, MAXLEN + 1, (bs,))
    tgt_len = (src_len.float() * (0.9 + 0.3 * torch.rand(bs))).long().clamp(4, MAXLEN)
    input_ids = torch.full((bs, int(src_len.max())), PAD, dtype=torch.long)
    labels = torch.full((bs, int(tgt_len.max())), -100, dtype=torch.long)
    for i in range(bs):
        n, m = int(src_len[i]), int(tgt_len[i])
        input_ids[i, 0] = EN_XX
        input_ids[i, 1 : n - 1] = torch.randint(4, VOCAB - 60, (n - 2,))
        input_ids[i, n - 1] = EOS
        labels[i, 0] = DE_DE
        labels[i, 1 : m - 1] = torch.randint(4, VOCAB - 60, (m - 2,))
        labels[i, m - 1] = EOS
    attention_mask = (input_ids != PAD).long()
    return input_ids.to(device), attention_mask.to(device), labels.to(device)


optimizer = torch.optim.AdamW(model.parameters(), lr=5e-5, weight_decay=0.0)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

model.train()
for step in range(STEPS):
    input_ids, attention_mask, labels = translation_batch(B)
    loss = model(input_ids=input_ids, attention_mask=attention_mask, labels=labels).loss
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    print(f"step {step} loss {loss.item():.4f} shapes {tuple(input_ids.shape)} {tuple(labels.shape)}")
    if step == 0 and device == "cuda":
        print(f"first step peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
del loss
if device == "cuda":
    print(f"train peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

model.eval()
with torch.inference_mode():
    input_ids, attention_mask, labels = translation_batch(EVAL_B)
    val_loss = model(input_ids=input_ids, attention_mask=attention_mask, labels=labels).loss
print(f"val loss {val_loss.item():.4f}")
if device == "cuda":
    print(f"eval peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

with torch.inference_mode():
    encoder_outputs = model.get_encoder()(input_ids=input_ids, attention_mask=attention_mask)
    greedy = model.generate(
        encoder_outputs=encoder_outputs,
        attention_mask=attention_mask,
        forced_bos_token_id=DE_DE,
        do_sample=False,
        max_new_tokens=GEN,
        min_new_tokens=GEN,
    )
print(f"greedy {tuple(greedy.shape)}")
if device == "cuda":
    print(f"greedy peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

with torch.inference_mode():
    sub = BaseModelOutput(last_hidden_state=encoder_outputs.last_hidden_state[:BEAM_B])
    beams = model.generate(
        encoder_outputs=sub,
        attention_mask=attention_mask[:BEAM_B],
        forced_bos_token_id=DE_DE,
        num_beams=5,
        max_new_tokens=BEAM_GEN,
        min_new_tokens=BEAM_GEN,
        length_penalty=1.0,
    )
print(f"beams {tuple(beams.shape)}")
if device == "cuda":
    print(
        f"beam allocated {torch.cuda.memory_allocated()}"
        f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
    )
