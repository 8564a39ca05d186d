"""TinyBERT-style distillation between two HF transformers XLM-RoBERTa-XL (pre-norm RoBERTa) masked
LMs built from configs with vocabulary 250,002: a frozen bf16 teacher (12 layers, 1,024 wide, 16
heads) and an fp32 student (4 layers, 512 wide, 8 heads) trained under bf16 autocast, both with
eager attention returning hidden states and attention maps; 15% of the tokens masked by a
torch.rand draw on the GPU; the loss is the MSE of every teacher's 3rd layer's attention maps and
of the hidden states (the student's through a learned 512 -> 1,024 projection), plus the
temperature-2 KL divergence of the logits gathered at the masked positions only (boolean
indexing); batch 8 x 256 with host-drawn lengths and padding, AdamW, 3 steps; then the student's
masked-token accuracy under no_grad; 5 phases."""

import os
import random

import torch
import torch.nn as nn
import torch.nn.functional as F
from transformers import XLMRobertaXLConfig, XLMRobertaXLForMaskedLM

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(10406)
rng = random.Random(10406)
V = 128 if SMALL else 250002
if SMALL:
    tcfg = XLMRobertaXLConfig(
        vocab_size=V, hidden_size=64, num_hidden_layers=6, num_attention_heads=4, intermediate_size=128
    )
    scfg = XLMRobertaXLConfig(
        vocab_size=V, hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64
    )
    B, S = 2, 24
else:
    tcfg = XLMRobertaXLConfig(
        vocab_size=V, hidden_size=1024, num_hidden_layers=12, num_attention_heads=16, intermediate_size=4096
    )
    scfg = XLMRobertaXLConfig(
        vocab_size=V, hidden_size=512, num_hidden_layers=4, num_attention_heads=8, intermediate_size=2048
    )
    B, S = 8, 256
for c in (tcfg, scfg):
    c.max_position_embeddings = 514
    c._attn_implementation = "eager"
T, MASK_ID, PAD = 2.0, 3, tcfg.pad_token_id
STRIDE = tcfg.num_hidden_layers // scfg.num_hidden_layers
device = "cuda" if torch.cuda.is_available() else "cpu"


def batch():
    lens = [rng.randint(S // 2, S) for _ in range(B)]
    ids = [[0] + [rng.randint(5, V - 1) for _ in range(k - 2)] + [2] + [PAD] * (S - k) for k in lens]
    mask = [[1] * k + [0] * (S - k) for k in lens]
    return torch.tensor(ids).to(device), torch.tensor(mask).to(device)


teacher = XLMRobertaXLForMaskedLM(tcfg).to(device=device, dtype=torch.bfloat16).eval()
teacher.requires_grad_(False)
student = XLMRobertaXLForMaskedLM(scfg).to(device)
proj = nn.Linear(scfg.hidden_size, tcfg.hidden_size).to(device)
optimizer = torch.optim.AdamW(list(student.parameters()) + list(proj.parameters()), lr=1e-4)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
student.train()
for step in range(3):
    ids, attn = batch()
    masked = (torch.rand(ids.shape, device=device) < 0.15) & (attn == 1)
    inp = ids.masked_fill(masked, MASK_ID)
    with torch.no_grad():
        t_out = teacher(input_ids=inp, attention_mask=attn, output_hidden_states=True, output_attentions=True)
    with torch.autocast(device, dtype=torch.bfloat16):
        s_out = student(input_ids=inp, attention_mask=attn, output_hidden_states=True, output_attentions=True)
        loss = 0.0
        for i in range(scfg.num_hidden_layers):
            t_att = t_out.attentions[(i + 1) * STRIDE - 1]
            s_att = s_out.attentions[i]
            heads = min(t_att.shape[1], s_att.shape[1])
            loss = loss + F.mse_loss(s_att[:, :heads].float(), t_att[:, :heads].float())
        for i in range(scfg.num_hidden_layers + 1):
            loss = loss + F.mse_loss(
                proj(s_out.hidden_states[i]).float(), t_out.hidden_states[i * STRIDE].float()
            )
        s_log = F.log_softmax(s_out.logits[masked].float() / T, dim=-1)
        t_prob = F.softmax(t_out.logits[masked].float() / T, dim=-1)
        loss = loss + F.kl_div(s_log, t_prob, reduction="batchmean") * T * T
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    if device == "cuda":
        print(
            f"step {step} masked {int(masked.sum())} loss {loss.item():.3f}"
            f" peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    del t_out, s_out, s_log, t_prob, loss
student.eval()
with torch.no_grad(), torch.autocast(device, dtype=torch.bfloat16):
    ids, attn = batch()
    masked = (torch.rand(ids.shape, device=device) < 0.15) & (attn == 1)
    logits = student(input_ids=ids.masked_fill(masked, MASK_ID), attention_mask=attn).logits
    acc = (logits[masked].argmax(-1) == ids[masked]).float().mean()
if device == "cuda":
    print(
        f"eval acc {acc.item():.4f}"
        f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
    )
