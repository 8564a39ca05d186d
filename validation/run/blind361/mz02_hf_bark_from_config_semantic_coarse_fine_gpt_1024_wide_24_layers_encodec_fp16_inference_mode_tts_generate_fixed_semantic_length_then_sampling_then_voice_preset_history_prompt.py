"""Text to speech with Bark as the Hugging Face Bark docs do, with the weights random: a BarkModel from a
`BarkConfig` the size of suno/bark (semantic, coarse-acoustics and fine-acoustics GPT stacks, each 1,024 wide,
24 layers, 16 heads; the semantic model's input vocabulary of 129,600 text + semantic tokens, the coarse
model's 12,096, the fine model's 8 codebook embeddings of 1,056; the default EnCodec 24 kHz codec), cast to
fp16 with `.half()`. A BarkModel from a config carries no nested generation config, so the script sets the one
suno/bark's generation_config.json holds (`BarkGenerationConfig()`'s defaults, as a dict). The prompts are
laid out as BarkProcessor does: text token ids right-padded to 256 with an attention mask. To keep lengths
fixed, the semantic stage generates exactly as many tokens as asked (`semantic_min_new_tokens ==
semantic_max_new_tokens`, so its end token is never chosen); the coarse stage's length follows from it (75 /
49.9 Hz x 2 codebooks, in sliding windows of 60), the fine stage fills the 6 remaining codebooks, EnCodec
decodes the 8 codebooks to 24 kHz audio.

Phases: 0 the model in fp16; 1 `inference_mode`, greedy generate for 2 prompts, 128 semantic tokens
(`return_output_lengths=True`); 2 sampling (temperature 0.7, top-k 50 in the semantic and coarse stages) for 4
prompts, 96 semantic tokens; 3 a voice preset as BarkProcessor loads one (`history_prompt`: a semantic prompt
of 320 tokens, coarse prompt (2, 480) and fine prompt (8, 480), built with torch) for 2 prompts, 128 semantic
tokens. Seeded; no sizes depend on values."""

import os

import torch
from transformers import BarkConfig, BarkModel, GenerationConfig
from transformers.models.bark.generation_configuration_bark import BarkGenerationConfig

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(3612)
device = "cuda" if torch.cuda.is_available() else "cpu"
cuda = device == "cuda"
if SMALL:
    WIDE = dict(hidden_size=64, num_layers=2, num_heads=4)
    B1, NEW1, B2, NEW2, B3, SEM_PROMPT, CODE_PROMPT = 2, 12, 3, 10, 2, 40, 60
else:
    WIDE = dict(hidden_size=1024, num_layers=24, num_heads=16)
    B1, NEW1, B2, NEW2, B3, SEM_PROMPT, CODE_PROMPT = 2, 128, 4, 96, 2, 320, 480
config = BarkConfig(
    semantic_config=dict(WIDE, input_vocab_size=129_600, output_vocab_size=10_048),
    coarse_acoustics_config=dict(WIDE, input_vocab_size=12_096, output_vocab_size=12_096),
    fine_acoustics_config=dict(WIDE, input_vocab_size=1_056, output_vocab_size=1_056),
)
MAX_TEXT = 256


def report(tag):
    if cuda:
        print(
            f"{tag}: max allocated {torch.cuda.max_memory_allocated()} "
            f"allocated {torch.cuda.memory_allocated()} "
            f"max reserved {torch.cuda.max_memory_reserved()} reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    else:
        print(f"{tag}: (cpu)")


def prompts(lengths):
    """Text token ids right-padded to 256 with an attention mask, as BarkProcessor returns them."""
    ids = torch.zeros(len(lengths), MAX_TEXT, dtype=torch.long)
    for row, n in enumerate(lengths):
        ids[row, :n] = torch.randint(100, 119_000, (n,))
    mask = (torch.arange(MAX_TEXT)[None] < torch.tensor(lengths)[:, None]).long()
    return ids.to(device), mask.to(device)


model = BarkModel(config).to(device).eval()
if cuda:
    model.half()
model.generation_config = GenerationConfig(**BarkGenerationConfig().to_dict())
print(f"parameters {sum(p.numel() for p in model.parameters()):,}")
report("phase0 bark fp16")

with torch.inference_mode():
    ids, mask = prompts([37, 52])
    audio, lengths = model.generate(
        input_ids=ids,
        attention_mask=mask,
        semantic_max_new_tokens=NEW1,
        semantic_min_new_tokens=NEW1,
        return_output_lengths=True,
    )
    print(f"greedy audio {tuple(audio.shape)} lengths {lengths}")
report(f"phase1 inference_mode greedy, {B1} prompts, {NEW1} semantic tokens")

del audio
with torch.inference_mode():
    ids, mask = prompts([20, 64, 41, 33][:B2])
    audio = model.generate(
        input_ids=ids,
        attention_mask=mask,
        do_sample=True,
        temperature=0.7,
        top_k=50,
        semantic_max_new_tokens=NEW2,
        semantic_min_new_tokens=NEW2,
    )
    print(f"sampled audio {tuple(audio.shape)}")
report(f"phase2 inference_mode sampling, {B2} prompts, {NEW2} semantic tokens")

del audio
voice = {
    "semantic_prompt": torch.randint(0, 10_000, (SEM_PROMPT,), device=device),
    "coarse_prompt": torch.randint(0, 1_024, (2, CODE_PROMPT), device=device),
    "fine_prompt": torch.randint(0, 1_024, (8, CODE_PROMPT), device=device),
}
with torch.inference_mode():
    ids, mask = prompts([45, 45])
    audio = model.generate(
        input_ids=ids,
        attention_mask=mask,
        history_prompt=voice,
        semantic_max_new_tokens=NEW1,
        semantic_min_new_tokens=NEW1,
    )
    print(f"voice preset audio {tuple(audio.shape)}")
report(f"phase3 voice preset history_prompt, {B3} prompts, {NEW1} semantic tokens")
