"""nn.TransformerDecoder (batch_first, norm_first, causal tgt_mask + memory padding mask) as a captioning
decoder over a projected encoder memory, fp32, Adam, 3 steps."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

DIM, LAYERS, HEADS, FF, VOCAB, B, TGT, MEM = (
    (64, 2, 4, 128, 300, 2, 12, 10) if os.environ.get("SMOKE") else (512, 6, 8, 2048, 16000, 48, 128, 196)
)
device = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(123)


class Captioner(nn.Module):
    def __init__(self):
        super().__init__()
        self.mem_proj = nn.Linear(768, DIM)
        self.tok = nn.Embedding(VOCAB, DIM, padding_idx=0)
        self.pos = nn.Parameter(torch.zeros(1, TGT, DIM))
        layer = nn.TransformerDecoderLayer(
            DIM, HEADS, dim_feedforward=FF, dropout=0.1, activation="gelu", batch_first=True, norm_first=True
        )
        self.decoder = nn.TransformerDecoder(layer, LAYERS, norm=nn.LayerNorm(DIM))
        self.lm_head = nn.Linear(DIM, VOCAB)

    def forward(self, features, mem_pad, tokens):
        memory = self.mem_proj(features)
        x = self.tok(tokens) + self.pos[:, : tokens.shape[1]]
        mask = nn.Transformer.generate_square_subsequent_mask(tokens.shape[1], device=tokens.device)
        h = self.decoder(x, memory, tgt_mask=mask, tgt_is_causal=True, memory_key_padding_mask=mem_pad)
        return self.lm_head(h)


model = Captioner().to(device)
optimizer = torch.optim.Adam(model.parameters(), lr=1e-4)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()

model.train()
for step in range(3):
    features = torch.randn(B, MEM, 768, device=device)
    mem_len = torch.randint(MEM // 2, MEM + 1, (B,), device=device)
    mem_pad = torch.arange(MEM, device=device)[None, :] >= mem_len[:, None]
    tokens = torch.randint(1, VOCAB, (B, TGT + 1), device=device)
    logits = model(features, mem_pad, tokens[:, :-1])
    loss = F.cross_entropy(logits.reshape(-1, VOCAB), tokens[:, 1:].reshape(-1), ignore_index=0)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    if device == "cuda":
        print(
            f"step {step} loss {loss.item():.3f} peak {torch.cuda.max_memory_allocated()} "
            f"allocated {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
