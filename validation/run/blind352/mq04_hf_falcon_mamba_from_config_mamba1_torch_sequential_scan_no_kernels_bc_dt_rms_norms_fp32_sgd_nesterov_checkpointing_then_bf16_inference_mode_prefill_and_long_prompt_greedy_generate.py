"""HF Falcon-Mamba (FalconMambaForCausalLM from a FalconMambaConfig, random weights): 16 Mamba-1 layers
of 1024 (inner 2,048, state 16, conv kernel 4, dt rank 64, the RMS norms Falcon-Mamba puts on B, C and
dt), tied embeddings, vocabulary 65,024. The machine has neither mamba-ssm nor causal-conv1d (nor
mambapy), so transformers' torch paths run: a depthwise conv1d, then the selective scan as a Python
loop over the sequence holding an fp32 (batch, 2048, 16) state, and for single tokens the torch
selective state update on the cache's recurrent state.

Phase 0: the model in fp32. Phase 1: two training steps at batch 4 x 256 with HF non-reentrant
gradient checkpointing, SGD (momentum 0.9, nesterov, weight decay 1e-4), clip_grad_norm_ 1.0.
Phase 2: `model.to(torch.bfloat16)`, then under inference_mode a scoring prefill of 4 x 512 with
logits_to_keep=1 and no cache. Phase 3: greedy generate() of 96 new tokens (min == max) from 2
prompts of 2048 with the recurrent cache (conv and ssm states per layer). Seeded; no sizes depend on
values."""

import torch
from transformers import FalconMambaConfig, FalconMambaForCausalLM

torch.manual_seed(35204)
V = 65024


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()} peak reserved {torch.cuda.max_memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


cfg = FalconMambaConfig(
    vocab_size=V,
    hidden_size=1024,
    state_size=16,
    num_hidden_layers=16,
    expand=2,
    conv_kernel=4,
    pad_token_id=0,
    bos_token_id=0,
    eos_token_id=11,
)
model = FalconMambaForCausalLM(cfg).to("cuda")
print(f"parameters: {sum(p.numel() for p in model.parameters()):,}")
report("phase0 model fp32")

model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
opt = torch.optim.SGD(model.parameters(), lr=1e-2, momentum=0.9, nesterov=True, weight_decay=1e-4)
model.train()
for step in range(2):
    ids = torch.randint(12, V, (4, 256), device="cuda")
    loss = model(input_ids=ids, labels=ids, use_cache=False).loss
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    opt.zero_grad(set_to_none=True)
    print(f"step {step}: loss {loss.item():.3f}")
    del loss, ids
report("phase1 train 2 steps 4 x 256 fp32, checkpointing, sgd nesterov")

model.gradient_checkpointing_disable()
del opt
model.to(torch.bfloat16).eval()
with torch.inference_mode():
    ids = torch.randint(12, V, (4, 512), device="cuda")
    logits = model(input_ids=ids, use_cache=False, logits_to_keep=1).logits
    print(f"prefill logits {tuple(logits.shape)} {logits.dtype}")
    del logits, ids
report("phase2 bf16 prefill 4 x 512 inference_mode, logits_to_keep=1")

prompts = torch.randint(12, V, (2, 2048), device="cuda")
with torch.inference_mode():
    gen = model.generate(
        input_ids=prompts,
        attention_mask=torch.ones_like(prompts),
        max_new_tokens=96,
        min_new_tokens=96,
        do_sample=False,
    )
print(f"generated {tuple(gen.shape)}")
del gen, prompts
report("phase3 bf16 greedy generate 2 x 2048 + 96, recurrent cache")
