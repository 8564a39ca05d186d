"""Zero-shot classification over a large text bank and WiSE-FT (Wortsman et al., 2022,
mlfoundations/wise-ft) on Hugging Face's CLIPModel from CLIPConfig (ViT-L/14 sized: a 224 x 224
image tower of 24 layers, 1,024 wide, 257 tokens; a 12-layer 768-wide text tower over 77 tokens,
vocabulary 49,408; a 768-wide projection), every weight bf16. First the zero-shot head as
wise-ft's `get_zeroshot_classifier` builds it, here for an ImageNet-21k-P-sized label set: 10,450
classes x 3 prompt templates = 31,350 prompts encoded under inference_mode in chunks of 2,090
(a class's templates together), normalized, averaged over the templates, normalized again, the
(768, 10,450) head scaled by the logit scale; then 4,096 images scored against it in chunks of
1,024 (fp32 logits, top-1/top-5). Then end-to-end fine-tuning of the image tower as wise-ft does
it (the text tower dropped from the optimizer; an `ImageClassifier` = the image tower, its
projection and a Linear head initialised from the zero-shot weights of the first 1,000 classes),
cross-entropy with label smoothing 0.1, AdamW (lr 3e-5, weight decay 0.1), gradient checkpointing
on the vision model, batch 192, 2 steps in one phase; then the weight-space ensemble: the
zero-shot and fine-tuned state dicts (the zero-shot one kept on the GPU as a clone before
fine-tuning) interpolated at alpha 0.5 key by key, loaded with `load_state_dict`, and the 4,096
images scored again over the 1,000-class head; 5 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F
from transformers import CLIPConfig, CLIPModel

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(16706)
if SMALL:
    text_cfg = dict(
        vocab_size=300,
        eos_token_id=299,
        bos_token_id=298,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
    )
    vision_cfg = dict(
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        image_size=28,
        patch_size=14,
    )
    CLASSES, TEMPLATES, CCHUNK, CTX, IMAGES, ICHUNK, FT_CLASSES, B, PROJ = 20, 3, 5, 16, 16, 8, 10, 8, 16
else:
    text_cfg = dict(
        vocab_size=49408,
        hidden_size=768,
        intermediate_size=3072,
        num_hidden_layers=12,
        num_attention_heads=12,
        max_position_embeddings=77,
    )
    vision_cfg = dict(
        hidden_size=1024,
        intermediate_size=4096,
        num_hidden_layers=24,
        num_attention_heads=16,
        image_size=224,
        patch_size=14,
    )
    CLASSES, TEMPLATES, CCHUNK, CTX, IMAGES, ICHUNK, FT_CLASSES, B, PROJ = (
        10450,
        3,
        2090,
        77,
        4096,
        1024,
        1000,
        192,
        768,
    )
config = CLIPConfig(text_config=text_cfg, vision_config=vision_cfg, projection_dim=PROJ)
EOT = config.text_config.vocab_size - 1
HW = config.vision_config.image_size
device = "cuda" if torch.cuda.is_available() else "cpu"
model = CLIPModel(config).to(device=device, dtype=torch.bfloat16).eval()
MEAN = torch.tensor([0.48145466, 0.4578275, 0.40821073], device=device).view(1, 3, 1, 1)
STD = torch.tensor([0.26862954, 0.26130258, 0.27577711], device=device).view(1, 3, 1, 1)


def phase(name):
    if device == "cuda":
        print(f"{name} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()


def prompts(n_classes):
    # "a photo of a {c}." style: a fixed template prefix, the class name's tokens, the end of text
    n = n_classes * TEMPLATES
    ids = torch.randint(1, EOT, (n, CTX), device=device)
    lengths = 6 + torch.arange(n, device=device) % 9
    mask = (torch.arange(CTX, device=device).unsqueeze(0) < lengths.unsqueeze(1)).long()
    ids = ids * mask
    ids[torch.arange(n, device=device), lengths - 1] = EOT
    return ids, mask


def images(n):
    return ((torch.rand(n, 3, HW, HW, device=device) - MEAN) / STD).to(torch.bfloat16)


phase("model")
with torch.inference_mode():
    weights = []
    per_chunk = CCHUNK // TEMPLATES
    for _start in range(0, CLASSES, per_chunk):
        ids, mask = prompts(per_chunk)
        emb = model.get_text_features(input_ids=ids, attention_mask=mask).pooler_output
        emb = emb / emb.norm(dim=-1, keepdim=True)
        emb = emb.view(per_chunk, TEMPLATES, -1).mean(dim=1)
        weights.append(emb / emb.norm(dim=-1, keepdim=True))
    zeroshot = torch.cat(weights).t() * model.logit_scale.exp()
    del weights, emb, ids, mask
phase("text bank")

with torch.inference_mode():
    correct1 = correct5 = 0
    for _start in range(0, IMAGES, ICHUNK):
        feats = model.get_image_features(pixel_values=images(ICHUNK)).pooler_output
        feats = feats / feats.norm(dim=-1, keepdim=True)
        logits = feats.float() @ zeroshot.float()
        labels = torch.randint(0, CLASSES, (ICHUNK,), device=device)
        top5 = logits.topk(5, dim=-1).indices
        correct1 += (top5[:, 0] == labels).sum().item()
        correct5 += (top5 == labels.unsqueeze(1)).any(1).sum().item()
    print(f"zero-shot top1 {correct1 / IMAGES:.4f} top5 {correct5 / IMAGES:.4f}")
phase("zero-shot")


class ImageClassifier(nn.Module):
    def __init__(self, clip, head_weights):
        super().__init__()
        self.vision_model = clip.vision_model
        self.visual_projection = clip.visual_projection
        self.head = nn.Linear(head_weights.shape[0], head_weights.shape[1], bias=True)
        with torch.no_grad():
            self.head.weight.copy_(head_weights.t())
            self.head.bias.zero_()

    def forward(self, pixels):
        feats = self.visual_projection(self.vision_model(pixel_values=pixels).pooler_output)
        return self.head(feats / feats.norm(dim=-1, keepdim=True))


head = zeroshot[:, :FT_CLASSES].clone()
del zeroshot
classifier = ImageClassifier(model, head).to(device=device, dtype=torch.bfloat16)
theta_0 = {k: v.clone() for k, v in classifier.state_dict().items()}
model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
classifier.train()
optimizer = torch.optim.AdamW(classifier.parameters(), lr=3e-5, weight_decay=0.1)
for step in range(2):
    labels = torch.randint(0, FT_CLASSES, (B,), device=device)
    logits = classifier(images(B))
    loss = F.cross_entropy(logits.float(), labels, label_smoothing=0.1)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    print(f"finetune step {step} loss {loss.item():.4f}")
    del logits, loss
phase("finetune")

del optimizer
classifier.eval()
alpha = 0.5
theta_1 = classifier.state_dict()
theta = {k: (1 - alpha) * theta_0[k] + alpha * theta_1[k] for k in theta_0}
classifier.load_state_dict(theta)
del theta, theta_0, theta_1
with torch.no_grad():
    correct = 0
    for _start in range(0, IMAGES, ICHUNK):
        logits = classifier(images(ICHUNK)).float()
        labels = torch.randint(0, FT_CLASSES, (ICHUNK,), device=device)
        correct += (logits.argmax(-1) == labels).sum().item()
    print(f"wise-ft top1 {correct / IMAGES:.4f}")
phase("wise-ft")
