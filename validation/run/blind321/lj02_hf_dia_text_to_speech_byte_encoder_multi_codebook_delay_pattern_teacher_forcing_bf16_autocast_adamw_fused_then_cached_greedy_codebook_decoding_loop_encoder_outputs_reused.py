"""Text to speech with HF Dia (model_type "dia"): DiaForConditionalGeneration from a small DiaConfig
(byte-level text encoder of 4 layers, 256 wide; audio decoder of 4 layers, 384 wide, grouped-query
self-attention with 2 KV heads, cross attention to the encoder, 9 codebooks of 1028 codes each with
Dia's delay pattern). Training with teacher forcing: codec frames (B, T, 9) shifted right by the delay
pattern by hand (each codebook c delayed by delay[c] frames, BOS 1026 before and PAD 1025 in the
delayed slots), labels flattened to (B * 9, T) with -100 on padding, fp32 weights, bf16 autocast,
fused AdamW, 3 steps on 6 utterances of 200 audio frames. Then inference in bf16 weights: the encoder
run once, and a greedy decoding loop by hand over 64 steps with the model's cache
(past_key_values, use_cache=True), each step feeding the 9 argmax codes of the previous frame.

Phases: 0 model and optimizer built; 1 first training step; 2 two more steps; 3 model cast to bf16 and
encoder pass; 4 cached greedy decoding loop."""

import torch
from transformers import DiaConfig, DiaForConditionalGeneration

torch.manual_seed(3212)
device = "cuda"
DELAY = [0, 8, 9, 10, 11, 12, 13, 14, 15]
C = len(DELAY)
PAD, EOS, BOS = 1025, 1024, 1026
config = DiaConfig(
    encoder_config=dict(
        num_hidden_layers=4,
        hidden_size=256,
        intermediate_size=1024,
        num_attention_heads=4,
        num_key_value_heads=4,
        head_dim=64,
        vocab_size=256,
    ),
    decoder_config=dict(
        num_hidden_layers=4,
        hidden_size=384,
        intermediate_size=1536,
        num_attention_heads=6,
        num_key_value_heads=2,
        head_dim=64,
        cross_num_attention_heads=4,
        cross_head_dim=64,
        cross_num_key_value_heads=4,
        cross_hidden_size=256,
        vocab_size=1028,
        num_channels=C,
    ),
    delay_pattern=DELAY,
)


def report(tag):
    print(
        f"{tag}: allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


def delayed(codes):
    b, t, _ = codes.shape
    out = torch.full((b, t + 1, C), PAD, dtype=torch.long)
    out[:, 0, :] = BOS
    for c, d in enumerate(DELAY):
        out[:, 1 + d :, c] = codes[:, : t - d, c]
        out[:, 1 : 1 + d, c] = BOS
    return out


model = DiaForConditionalGeneration(config).to(device)
optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4, fused=True)
report("built")

B, S, T = 6, 96, 200
model.train()
for step in range(3):
    text = torch.randint(0, 256, (B, S))
    tmask = torch.ones(B, S, dtype=torch.long)
    tmask[B // 2 :, S - 20 :] = 0
    codes = torch.randint(0, 1024, (B, T, C))
    inp = delayed(codes)
    dec_in = inp[:, :-1]
    labels = inp[:, 1:].clone()
    labels[labels >= PAD] = -100
    labels = labels.transpose(1, 2).reshape(B * C, T)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        out = model(
            input_ids=text.to(device),
            attention_mask=tmask.to(device),
            decoder_input_ids=dec_in.to(device),
            labels=labels.to(device),
        )
    out.loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    print(f"step {step} loss {out.loss.item():.4f} logits {tuple(out.logits.shape)}")
    del out
    if step == 0:
        report("step0")
report("steps1-2")

del optimizer
model = model.to(torch.bfloat16).eval()
GB, STEPS = 4, 64
text = torch.randint(0, 256, (GB, S), device=device)
with torch.no_grad():
    enc = model.get_encoder()(input_ids=text)
print("encoder", tuple(enc.last_hidden_state.shape))
report("encoder")

with torch.no_grad():
    cur = torch.full((GB, 1, C), BOS, dtype=torch.long, device=device)
    past = None
    frames = []
    for _ in range(STEPS):
        out = model(encoder_outputs=enc, decoder_input_ids=cur, past_key_values=past, use_cache=True)
        past = out.past_key_values
        nxt = out.logits[:, -1, :].view(GB, C, -1).argmax(-1)
        frames.append(nxt)
        cur = nxt[:, None, :]
    frames = torch.stack(frames, 1)
print("decoded", tuple(frames.shape))
del out, past
report("decode")
