"""Speaker verification with HF UniSpeech-SAT's x-vector head (conv feature encoder, 12-layer
transformer with a convolutional position embedding, weighted layer sum, TDNN layers, statistics
pooling), built from a config, fp16 weights under torch.inference_mode: enrolment embeddings of 32
clips of 6 s at 16 kHz, then a trial batch of 24 clips of 2 to 9 s padded on the host with an
attention mask, cosine scores against the enrolments; 3 phases."""

import os

import torch
import torch.nn.functional as F
from transformers import UniSpeechSatConfig, UniSpeechSatForXVector

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(9904)
if SMALL:
    cfg = UniSpeechSatConfig(
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=128,
        conv_dim=(32, 32, 32, 32, 32, 32, 32),
        num_conv_pos_embeddings=16,
        tdnn_dim=(64, 64, 64, 64, 128),
        xvector_output_dim=32,
        use_weighted_layer_sum=True,
        feat_extract_norm="layer",
        do_stable_layer_norm=True,
    )
    ENROL, ENROL_S, TRIAL, RATE = 4, 2, 3, 4000
else:
    cfg = UniSpeechSatConfig(
        hidden_size=768,
        num_hidden_layers=12,
        num_attention_heads=12,
        intermediate_size=3072,
        use_weighted_layer_sum=True,
        feat_extract_norm="layer",
        do_stable_layer_norm=True,
    )
    ENROL, ENROL_S, TRIAL, RATE = 32, 6, 24, 16000
device = "cuda" if torch.cuda.is_available() else "cpu"
dtype = torch.float16 if device == "cuda" else torch.float32
model = UniSpeechSatForXVector(cfg).to(device=device, dtype=dtype).eval()
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()


def report(name):
    if device == "cuda":
        print(f"{name} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()


with torch.inference_mode():
    enrol_audio = torch.randn(ENROL, ENROL_S * RATE, device=device, dtype=dtype) * 0.1
    enrol = F.normalize(model(input_values=enrol_audio).embeddings.float(), dim=-1)
    del enrol_audio
    report("enrol")

    lengths = [int(RATE * (2 + (7 * k) % 8 + 0.25 * (k % 3))) for k in range(TRIAL)]
    width = max(lengths)
    audio = torch.zeros(TRIAL, width)
    mask = torch.zeros(TRIAL, width, dtype=torch.long)
    for k, n in enumerate(lengths):
        audio[k, :n] = torch.randn(n) * 0.1
        mask[k, :n] = 1
    out = model(input_values=audio.to(device=device, dtype=dtype), attention_mask=mask.to(device))
    trial = F.normalize(out.embeddings.float(), dim=-1)
    scores = trial @ enrol.T
    best = scores.max(dim=1)
    print(f"trial scores {tuple(scores.shape)} best {best.values.mean().item():.3f}")
    report("trial")
