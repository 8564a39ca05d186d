"""Knowledge distillation of a language model: a frozen bf16 teacher (HF LlamaForCausalLM, 2048
wide, 12 layers) in eval under no_grad and a trainable bf16 student (1024 wide, 8 layers) sharing
a 32k vocabulary, KL divergence between temperature-softened distributions (log_target) plus the
student's own cross entropy, AdamW (foreach), batch 8 at 512 tokens, 2 steps; 3 phases."""

import os

import torch
import torch.nn.functional as F
from transformers import LlamaConfig, LlamaForCausalLM

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(4106)


def cfg(width, layers, heads):
    if SMALL:
        return LlamaConfig(
            vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4
        )
    return LlamaConfig(
        vocab_size=32000,
        hidden_size=width,
        intermediate_size=width * 11 // 4,
        num_hidden_layers=layers,
        num_attention_heads=heads,
    )


B, S, T = (2, 16, 2.0) if SMALL else (8, 512, 2.0)
device = "cuda" if torch.cuda.is_available() else "cpu"
teacher = LlamaForCausalLM(cfg(2048, 12, 16)).to(device=device, dtype=torch.bfloat16).eval()
student = LlamaForCausalLM(cfg(1024, 8, 16)).to(device=device, dtype=torch.bfloat16)
teacher.requires_grad_(False)
optimizer = torch.optim.AdamW(student.parameters(), lr=1e-4)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    ids = torch.randint(0, student.config.vocab_size, (B, S), device=device)
    with torch.no_grad():
        t_logits = teacher(input_ids=ids).logits
    out = student(input_ids=ids, labels=ids)
    kd = F.kl_div(
        F.log_softmax(out.logits.float() / T, dim=-1),
        F.log_softmax(t_logits.float() / T, dim=-1),
        reduction="batchmean",
        log_target=True,
    )
    loss = 0.5 * out.loss + 0.5 * T * T * kd
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    del ids, t_logits, out, kd, loss
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
