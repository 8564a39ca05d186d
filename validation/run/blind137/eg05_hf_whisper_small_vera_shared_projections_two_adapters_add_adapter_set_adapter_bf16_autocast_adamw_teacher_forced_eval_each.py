"""VeRA on a Hugging Face Whisper (WhisperConfig at whisper-small's size: 768 wide, 12 encoder and 12
decoder layers, 80 mel bins over 3,000 frames, 51,865 vocabulary) for speech recognition, two
adapters on the same frozen fp32 model: "en" (VeRA rank 256 on every q_proj and v_proj, self- and
cross-attention, the frozen random projections vera_A/vera_B shared by all layers and saved, only
the per-layer scaling vectors d and b trained) for 3 steps, then "de" added by `add_adapter` with
the same PRNG key (rank 256, d initialised at 0.05) made active by `set_adapter` and trained 3 steps
with its own AdamW; bf16 autocast, batch 16 of 30-second log-mel inputs, 160 label tokens
(the pad tail masked to -100); then each adapter's teacher-forced loss on 32 utterances at
batch 16 under no_grad; 4 phases."""

import os

import torch
from peft import VeraConfig, get_peft_model
from transformers import WhisperConfig, WhisperForConditionalGeneration

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(13705)
B, FRAMES, L, N_EVAL = (2, 200, 16, 4) if SMALL else (16, 3000, 160, 32)
config = WhisperConfig(
    vocab_size=51865 if not SMALL else 512,
    num_mel_bins=80,
    d_model=768 if not SMALL else 64,
    encoder_layers=12 if not SMALL else 2,
    decoder_layers=12 if not SMALL else 2,
    encoder_attention_heads=12 if not SMALL else 4,
    decoder_attention_heads=12 if not SMALL else 4,
    encoder_ffn_dim=3072 if not SMALL else 128,
    decoder_ffn_dim=3072 if not SMALL else 128,
    max_source_positions=FRAMES // 2,
    max_target_positions=448,
    decoder_start_token_id=50258 if not SMALL else 1,
    pad_token_id=50257 if not SMALL else 0,
)
device = "cuda" if torch.cuda.is_available() else "cpu"
amp = device == "cuda"
en = VeraConfig(r=256, target_modules=["q_proj", "v_proj"], projection_prng_key=0x137, save_projection=True)
de = VeraConfig(
    r=256,
    target_modules=["q_proj", "v_proj"],
    projection_prng_key=0x137,
    save_projection=True,
    d_initial=0.05,
)
model = get_peft_model(WhisperForConditionalGeneration(config), en, adapter_name="en").to(device)
model.print_trainable_parameters()
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()


def batch(n):
    feats = torch.randn(n, config.num_mel_bins, FRAMES, device=device)
    labels = torch.randint(0, config.vocab_size - 100, (n, L), device=device)
    labels[n // 2 :, L - L // 5 :] = -100
    return feats, labels


def train(opt):
    model.train()
    for _ in range(3):
        feats, labels = batch(B)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
            loss = model(input_features=feats, labels=labels).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    return loss


opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=4e-3)
loss = train(opt)
if device == "cuda":
    print(
        f"en loss {loss.item():.4f}"
        f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()

model.add_adapter("de", de)
model.set_adapter("de")
opt2 = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=4e-3)
loss = train(opt2)
if device == "cuda":
    print(
        f"de loss {loss.item():.4f}"
        f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()

del loss
model.eval()
losses = {"en": 0.0, "de": 0.0}
with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
    for _i in range(0, N_EVAL, B):
        feats, labels = batch(B)
        for name in ("en", "de"):
            model.set_adapter(name)
            losses[name] += model(input_features=feats, labels=labels).loss.float()
if device == "cuda":
    print(
        f"eval en {float(losses['en']):.4f} de {float(losses['de']):.4f}"
        f" peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
