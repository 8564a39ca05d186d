"""Janus-Pro-style unified understanding and image generation (transformers 5.17's
`JanusForConditionalGeneration`) from config: a SigLIP-like vision encoder of 12 layers (d 768, 12 heads,
384 x 384, patch 16: 576 image tokens) with its MLP aligner for understanding, a Llama language model of
12 layers (d 1,536, 12 heads, MLP 4,096, vocabulary 102,400), and for generation the VQ image tokenizer
(16,384 codes of 8 dims, LlamaGen-style VQGAN decoder, base 128 channels, multipliers 1, 1, 2, 2, 4) with
its generation embeddings, aligner and head. Pure bf16 under `torch.inference_mode()`, inputs by hand, no
processor.

Phases: 0 model in bf16; 1 image understanding: greedy text `generate()` for 4 prompts, each with 576
<image_placeholder> tokens between <begin_of_image> and <end_of_image> and pixel_values (4, 3, 384, 384),
min_new_tokens == max_new_tokens == 48; 2 text-to-image: `generate(generation_mode="image")` for 2
prompts (greedy, classifier-free guidance 5: the batch doubled with an unconditional copy, a static cache
allocated up front, 576 steps through the generation head; transformers 5.17's Janus `generate` calls
`_prepare_static_cache` without its new `prefill_chunk_size` argument, a TypeError, so the script passes
the StaticCache generate would build, 576 + prompt length long, as `past_key_values`);
3 `decode_image_tokens` of those 2 x 576 codes through the VQGAN decoder to 2 x 384 x 384 x 3 pixels,
then 4 more prompts generated and decoded in one batch. Seeded; no sizes depend on values."""

import torch
from transformers import JanusConfig, JanusForConditionalGeneration, StaticCache

torch.manual_seed(3584)


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


D = 1536
cfg = JanusConfig(
    text_config=dict(
        model_type="llama",
        vocab_size=102400,
        hidden_size=D,
        intermediate_size=4096,
        num_hidden_layers=12,
        num_attention_heads=12,
        num_key_value_heads=12,
        max_position_embeddings=4096,
        bos_token_id=100000,
        pad_token_id=100015,
        eos_token_id=100001,
    ),
    vision_config=dict(
        hidden_size=768,
        num_hidden_layers=12,
        num_attention_heads=12,
        image_size=384,
        patch_size=16,
        projection_dim=D,
        num_image_tokens=576,
    ),
    vq_config=dict(
        embed_dim=8,
        num_embeddings=16384,
        base_channels=128,
        channel_multiplier=[1, 1, 2, 2, 4],
        projection_dim=D,
        image_token_embed_dim=D,
    ),
    image_token_id=100581,
)
cfg._attn_implementation = "sdpa"
model = JanusForConditionalGeneration(cfg).to(device="cuda", dtype=torch.bfloat16).eval()
BOS, PAD, BOI, EOI = 100000, 100015, 100016, 100593
model.generation_config.bos_token_id = BOS
model.generation_config.pad_token_id = PAD
model.generation_config.eos_token_id = 100001
model.generation_config.generation_kwargs = {"boi_token_id": BOI}
print(f"parameters: {sum(p.numel() for p in model.parameters()):,}")
report("phase0 janus bf16")


def understanding_prompt(question=40):
    ids = torch.randint(1000, 100000, (16 + 576 + question,))
    ids[0] = BOS
    ids[14] = BOI
    ids[15 : 15 + 576] = cfg.image_token_id
    ids[15 + 576] = EOI
    return ids


ids = torch.stack([understanding_prompt() for _ in range(4)]).cuda()
pixels = torch.randn(4, 3, 384, 384, dtype=torch.bfloat16).cuda()
with torch.inference_mode():
    out = model.generate(
        input_ids=ids,
        attention_mask=torch.ones_like(ids),
        pixel_values=pixels,
        max_new_tokens=48,
        min_new_tokens=48,
        do_sample=False,
    )
print("understanding", tuple(out.shape))
del out, ids, pixels
report("phase1 image understanding, 4 x 576 image tokens, 48 new tokens")


def image_prompts(n, text=28):
    ids = torch.randint(1000, 100000, (n, text))
    ids[:, 0] = BOS
    ids[:, -1] = BOI
    return ids.cuda()


def text_to_image(ids):
    # the cache Janus's generate would build itself (batch doubled for the unconditional copy)
    cache = StaticCache(config=model.config, max_cache_len=576 + ids.shape[1])
    return model.generate(
        input_ids=ids,
        attention_mask=torch.ones_like(ids),
        generation_mode="image",
        do_sample=False,
        guidance_scale=5.0,
        past_key_values=cache,
    )


ids = image_prompts(2)
with torch.inference_mode():
    codes = text_to_image(ids)
print("image codes", tuple(codes.shape))
report("phase2 text-to-image, 2 prompts, cfg 5, 576 codes each")

with torch.inference_mode():
    images = model.decode_image_tokens(codes)
    print("decoded", tuple(images.shape))
    del images, codes
    ids = image_prompts(4, text=40)
    codes = text_to_image(ids)
    images = model.decode_image_tokens(codes)
print("decoded", tuple(images.shape))
del images, codes
report("phase3 vqgan decode 2 images, then 4 prompts generated and decoded")
