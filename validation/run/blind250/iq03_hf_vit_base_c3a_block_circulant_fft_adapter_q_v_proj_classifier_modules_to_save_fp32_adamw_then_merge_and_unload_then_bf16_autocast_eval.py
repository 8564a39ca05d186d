"""C3A on a ViT classifier: a from-config ViT-Base/16 (224 px, 12 layers, d 768, 100 classes, fp32)
with peft's C3A (circular convolution adapter, block size 128, on q_proj and v_proj; the classifier in
modules_to_save). C3A's forward casts the input to fp32 and runs `BlockCircularConvolution` (an rfft
of the input blocks and of the kernels, a product, an irfft: peft/tuners/c3a/utils.py) beside the
base linear. AdamW, batch 16, three steps with TF32 matmuls; then merge_and_unload (the circulant
delta made dense per layer) and bf16-autocast eval of 64 images in two batches. 4 phases."""

import torch
import torch.nn.functional as F
from peft import C3AConfig, get_peft_model
from transformers import ViTConfig, ViTForImageClassification

torch.manual_seed(2503)
torch.backends.cuda.matmul.allow_tf32 = True
B, C = 16, 100


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


cfg = ViTConfig(image_size=224, patch_size=16, num_labels=C)
model = ViTForImageClassification(cfg)
model = get_peft_model(
    model, C3AConfig(block_size=128, target_modules=["q_proj", "v_proj"], modules_to_save=["classifier"])
)
model.print_trainable_parameters()
model.cuda()
x = torch.randn(B, 3, 224, 224, device="cuda")
y = torch.randint(0, C, (B,), device="cuda")
report("setup")

opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-3)
model.train()
for _ in range(3):
    loss = F.cross_entropy(model(pixel_values=x).logits, y)
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    del loss
report("train_c3a_fp32_tf32")

del opt
merged = model.merge_and_unload()
report("merge_and_unload")

merged.eval()
correct = 0
with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
    for _ in range(2):
        xe = torch.randn(32, 3, 224, 224, device="cuda")
        correct += int((merged(pixel_values=xe).logits.argmax(-1) == 0).sum())
        del xe
print(correct)
report("eval_bf16_autocast")
