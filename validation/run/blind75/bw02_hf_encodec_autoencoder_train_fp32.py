"""HF EncodecModel (SEANet conv1d encoder/decoder with weight norm, an LSTM in each, a residual
vector quantizer) built from its 24 kHz config, fp32, trained to reconstruct 1-second clips at batch
8 with an L1 loss plus the commitment loss, Adam, 2 steps; then encode+decode under no_grad; 4 phases."""

import os

import torch
import torch.nn.functional as F
from transformers import EncodecConfig, EncodecModel

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(7502)
if SMALL:
    config = EncodecConfig(
        num_filters=4,
        hidden_size=16,
        codebook_size=32,
        upsampling_ratios=[4, 2],
        target_bandwidths=[24.0, 48.0],
    )
    B, T = 2, 800
else:
    config = EncodecConfig()
    B, T = 8, 24000
device = "cuda" if torch.cuda.is_available() else "cpu"
model = EncodecModel(config).to(device).train()
optimizer = torch.optim.Adam(model.parameters(), lr=3e-4)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    audio = torch.randn(B, 1, T, device=device)
    out = model(input_values=audio, bandwidth=config.target_bandwidths[-1])
    recon = out.audio_values[..., :T]
    loss = F.l1_loss(recon, audio)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    del audio, out, recon, loss
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
model.eval()
with torch.no_grad():
    audio = torch.randn(B, 1, T, device=device)
    enc = model.encode(audio, bandwidth=config.target_bandwidths[0])
    dec = model.decode(enc.audio_codes, enc.audio_scales)[0]
if device == "cuda":
    print(f"codec peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
