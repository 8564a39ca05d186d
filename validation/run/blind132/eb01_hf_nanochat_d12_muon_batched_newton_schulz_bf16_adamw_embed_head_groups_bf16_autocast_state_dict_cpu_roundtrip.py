"""nanochat's recipe on the Hugging Face NanoChat model (NanoChatConfig, d12: 768 wide, 12 layers,
6 heads, ReLU^2 MLP of 3,072, logit softcap 15, vocabulary 65,536), fp32 weights under bf16
autocast: Muon for the transformer blocks' matrices (momentum 0.95 by lerp_, Nesterov, the
quintic Newton-Schulz orthogonalisation in bf16 of each shape group's updates stacked into one
3-D batch, applied by `_foreach_add_` scaled by sqrt(max(1, rows/cols))), AdamW (fused) for the
embedding and the head in two groups of their own learning rates with no weight decay; 2 steps of
8 x 2,048 tokens, then both optimizers' state_dict() saved to an in-memory buffer on the CPU, the
optimizers rebuilt and loaded back, one more step, and a held-out loss under inference_mode; 6
phases."""

import io
import os

import torch
import torch.nn.functional as F
from transformers import NanoChatConfig, NanoChatForCausalLM

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(13201)
B, T = (2, 128) if SMALL else (8, 2048)
cfg = NanoChatConfig(
    vocab_size=65536 if not SMALL else 4096,
    hidden_size=768 if not SMALL else 128,
    intermediate_size=3072 if not SMALL else 512,
    num_hidden_layers=12 if not SMALL else 2,
    num_attention_heads=6 if not SMALL else 2,
    num_key_value_heads=6 if not SMALL else 2,
    max_position_embeddings=T,
)
device = "cuda" if torch.cuda.is_available() else "cpu"
amp = device == "cuda"


def zeropower_via_newtonschulz5(G, steps=5):
    a, b, c = (3.4445, -4.7750, 2.0315)
    X = G.bfloat16()
    if G.size(-2) > G.size(-1):
        X = X.mT
    X = X / (X.norm(dim=(-2, -1), keepdim=True) + 1e-7)
    for _ in range(steps):
        A = X @ X.mT
        B_ = b * A + c * A @ A
        X = a * X + B_ @ X
    if G.size(-2) > G.size(-1):
        X = X.mT
    return X


class Muon(torch.optim.Optimizer):
    def __init__(self, params, lr=0.02, momentum=0.95, nesterov=True, ns_steps=5):
        params = list(params)
        groups = [{"params": [p for p in params if p.shape == s]} for s in sorted({p.shape for p in params})]
        super().__init__(groups, dict(lr=lr, momentum=momentum, nesterov=nesterov, ns_steps=ns_steps))

    @torch.no_grad()
    def step(self):
        for group in self.param_groups:
            ps = [p for p in group["params"] if p.grad is not None]
            updates = []
            for p in ps:
                state = self.state[p]
                if "momentum_buffer" not in state:
                    state["momentum_buffer"] = torch.zeros_like(p.grad)
                buf = state["momentum_buffer"]
                buf.lerp_(p.grad, 1 - group["momentum"])
                updates.append(p.grad.lerp_(buf, group["momentum"]) if group["nesterov"] else buf)
            X = zeropower_via_newtonschulz5(torch.stack(updates), group["ns_steps"])
            scale = max(1, ps[0].size(-2) / ps[0].size(-1)) ** 0.5
            torch._foreach_add_(
                ps, [x.to(p.dtype) for x, p in zip(X.unbind(0), ps, strict=True)], alpha=-group["lr"] * scale
            )


model = NanoChatForCausalLM(cfg).to(device)
model.train()


def build():
    matrices = [p for n, p in model.model.layers.named_parameters() if p.ndim == 2]
    others = [p for n, p in model.model.layers.named_parameters() if p.ndim != 2] + list(
        model.model.norm.parameters()
    )
    adamw = torch.optim.AdamW(
        [
            {"params": list(model.model.embed_tokens.parameters()), "lr": 0.2 * (768 / 768) ** -0.5},
            {"params": list(model.lm_head.parameters()), "lr": 0.004},
            {"params": others, "lr": 0.004},
        ],
        betas=(0.8, 0.95),
        eps=1e-10,
        weight_decay=0.0,
        fused=device == "cuda",
    )
    muon = Muon(matrices, lr=0.02, momentum=0.95)
    return adamw, muon


adamw, muon = build()
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()


def train_step(step):
    x = torch.randint(0, cfg.vocab_size, (B, T), device=device)
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
        out = model(input_ids=x, labels=x)
    out.loss.backward()
    frac = min(step / 300, 1)
    for g in muon.param_groups:
        g["momentum"] = (1 - frac) * 0.85 + frac * 0.95
    adamw.step()
    muon.step()
    model.zero_grad(set_to_none=True)
    if device == "cuda":
        print(
            f"step {step} loss {out.loss.item():.4f}"
            f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()


for step in range(2):
    train_step(step)

buf = io.BytesIO()
torch.save({"adamw": adamw.state_dict(), "muon": muon.state_dict()}, buf)
del adamw, muon
if device == "cuda":
    torch.cuda.empty_cache()
    print(
        f"saved {buf.tell()} bytes allocated {torch.cuda.memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()
buf.seek(0)
sd = torch.load(buf, map_location="cpu")
adamw, muon = build()
adamw.load_state_dict(sd["adamw"])
muon.load_state_dict(sd["muon"])
del sd
if device == "cuda":
    print(
        f"loaded allocated {torch.cuda.memory_allocated()}"
        f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()

train_step(2)

model.eval()
with torch.inference_mode(), torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
    x = torch.randint(0, cfg.vocab_size, (B, T), device=device)
    logits = model(input_ids=x).logits
    val = F.cross_entropy(logits[:, :-1].float().flatten(0, 1), x[:, 1:].flatten())
if device == "cuda":
    print(
        f"eval loss {val.item():.4f} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
