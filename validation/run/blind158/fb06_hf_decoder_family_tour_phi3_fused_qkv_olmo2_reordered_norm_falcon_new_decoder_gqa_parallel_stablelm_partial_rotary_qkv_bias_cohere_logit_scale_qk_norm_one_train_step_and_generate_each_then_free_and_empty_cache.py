"""A family tour as people write it to compare decoders: five HF causal LMs built one after another
from small configs (1,024 wide, 6 layers, 16 heads unless said), each given one training step with
labels=input_ids at batch 8 x 512 in its own regime and one short generate(), then deleted with
gc.collect() and torch.cuda.empty_cache() before the next; each family is a phase.
- Phi-3 (fused qkv_proj and gate_up_proj, 8 key/value heads, vocabulary 32,064): fp32 weights, bf16
  autocast, SGD with Nesterov momentum 0.9; greedy, 8 prompts of 128, 32 new tokens.
- OLMo-2 (q/k RMSNorm over the full projection, norms after attention and MLP, vocabulary 100,352):
  pure bf16, AdamW (foreach); top-k 50 sampling, 8 prompts of 128, 32 new tokens.
- Falcon (new_decoder_architecture with 4 key/value heads, parallel attention and MLP, GELU 4,096,
  vocabulary 65,024 tied): fp32 weights, fp16 autocast with a GradScaler, Adam; beam search with 2
  beams, 4 prompts of 128, 24 new tokens.
- StableLM (partial rotary 0.25, qkv bias, LayerNorm, vocabulary 50,304): fp32 with TF32 matmuls,
  fused AdamW; greedy with cache_implementation="static" (compile disabled), 8 prompts of 128,
  32 new tokens.
- Cohere (parallel block with one LayerNorm, q/k LayerNorm, logit_scale 0.0625, 8 key/value heads,
  vocabulary 256,000 tied): pure bf16, fused AdamW; sampling at temperature 0.3 with 2 return
  sequences, 4 prompts of 128, 32 new tokens.
5 phases."""

import gc
import os

import torch
from transformers import (
    CohereConfig,
    CohereForCausalLM,
    FalconConfig,
    FalconForCausalLM,
    Olmo2Config,
    Olmo2ForCausalLM,
    Phi3Config,
    Phi3ForCausalLM,
    StableLmConfig,
    StableLmForCausalLM,
)

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(15806)
device = "cuda" if torch.cuda.is_available() else "cpu"
if SMALL:
    H, L, NH, FF, B, T, P, N = 64, 2, 4, 128, 2, 32, 8, 4
    V = {"phi3": 512, "olmo2": 512, "falcon": 512, "stablelm": 512, "cohere": 512}
else:
    H, L, NH, FF, B, T, P, N = 1024, 6, 16, 2816, 8, 512, 128, 32
    V = {"phi3": 32064, "olmo2": 100352, "falcon": 65024, "stablelm": 50304, "cohere": 256000}
KV = NH // 2

families = {
    "phi3": lambda: Phi3ForCausalLM(
        Phi3Config(
            vocab_size=V["phi3"],
            hidden_size=H,
            intermediate_size=FF,
            num_hidden_layers=L,
            num_attention_heads=NH,
            num_key_value_heads=KV,
            pad_token_id=0,
            max_position_embeddings=4096,
        )
    ),
    "olmo2": lambda: Olmo2ForCausalLM(
        Olmo2Config(
            vocab_size=V["olmo2"],
            hidden_size=H,
            intermediate_size=FF,
            num_hidden_layers=L,
            num_attention_heads=NH,
            num_key_value_heads=NH,
            pad_token_id=0,
            max_position_embeddings=4096,
        )
    ),
    "falcon": lambda: FalconForCausalLM(
        FalconConfig(
            vocab_size=V["falcon"],
            hidden_size=H,
            num_hidden_layers=L,
            num_attention_heads=NH,
            num_kv_heads=NH // 4,
            new_decoder_architecture=True,
            parallel_attn=True,
            ffn_hidden_size=4 * H,
            bias=False,
            max_position_embeddings=4096,
        )
    ),
    "stablelm": lambda: StableLmForCausalLM(
        StableLmConfig(
            vocab_size=V["stablelm"],
            hidden_size=H,
            intermediate_size=FF,
            num_hidden_layers=L,
            num_attention_heads=NH,
            num_key_value_heads=NH,
            partial_rotary_factor=0.25,
            use_qkv_bias=True,
            max_position_embeddings=4096,
        )
    ),
    "cohere": lambda: CohereForCausalLM(
        CohereConfig(
            vocab_size=V["cohere"],
            hidden_size=H,
            intermediate_size=FF,
            num_hidden_layers=L,
            num_attention_heads=NH,
            num_key_value_heads=KV,
            logit_scale=0.0625,
            use_qk_norm=True,
            pad_token_id=0,
            max_position_embeddings=4096,
        )
    ),
}

for name, build in families.items():
    model = build()
    scaler = None
    autocast = None
    if name == "phi3":
        model = model.to(device)
        opt = torch.optim.SGD(model.parameters(), lr=1e-2, momentum=0.9, nesterov=True)
        autocast = torch.bfloat16
    elif name == "olmo2":
        model = model.to(device=device, dtype=torch.bfloat16)
        opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1)
    elif name == "falcon":
        model = model.to(device)
        opt = torch.optim.Adam(model.parameters(), lr=1e-4)
        scaler = torch.amp.GradScaler(device, enabled=device == "cuda")
        autocast = torch.float16 if device == "cuda" else torch.bfloat16
    elif name == "stablelm":
        torch.backends.cuda.matmul.allow_tf32 = True
        model = model.to(device)
        opt = torch.optim.AdamW(model.parameters(), lr=2e-4, fused=device == "cuda")
    else:
        torch.backends.cuda.matmul.allow_tf32 = False
        model = model.to(device=device, dtype=torch.bfloat16)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=device == "cuda")

    model.train()
    ids = torch.randint(0, V[name], (B, T), device=device)
    with torch.autocast(device_type=device, dtype=autocast or torch.float32, enabled=autocast is not None):
        loss = model(input_ids=ids, labels=ids).loss
    if scaler is not None:
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
    else:
        loss.backward()
        opt.step()
    opt.zero_grad(set_to_none=True)
    loss = loss.item()

    model.eval()
    prompts = torch.randint(1, V[name], (B if name not in ("falcon", "cohere") else B // 2, P), device=device)
    kwargs = dict(attention_mask=torch.ones_like(prompts), max_new_tokens=N, min_new_tokens=N, pad_token_id=0)
    if name == "phi3":
        kwargs.update(do_sample=False)
    elif name == "olmo2":
        kwargs.update(do_sample=True, top_k=50)
    elif name == "falcon":
        kwargs.update(num_beams=2, do_sample=False, max_new_tokens=N * 3 // 4, min_new_tokens=N * 3 // 4)
    elif name == "stablelm":
        kwargs.update(do_sample=False, cache_implementation="static", disable_compile=True)
    else:
        kwargs.update(do_sample=True, temperature=0.3, num_return_sequences=2)
    with torch.no_grad():
        gen = model.generate(prompts, **kwargs)
    if device == "cuda":
        torch.cuda.synchronize()
        print(
            f"{name} loss {loss:.4f} gen {tuple(gen.shape)} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
    del model, opt, scaler, ids, prompts, gen
    gc.collect()
    if device == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
