"""Second-order training of a torchvision RegNet with timm's AdaHessian, as timm's train.py runs it when
the optimizer `is_second_order` (`loss.backward(create_graph=True)`). Model:
`torchvision.models.regnet_x_1_6gf(weights=None, num_classes=100)` (grouped 3x3 convolutions of group
width 24, BatchNorm, ReLU) in fp32. Optimizer: `timm.optim.create_optimizer_v2(model, opt="adahessian",
lr=0.15, weight_decay=5e-4)`: every step draws Rademacher vectors from its own CUDA `torch.Generator`
(re-made on the parameters' device at the first step) and takes a Hessian-vector product with
`torch.autograd.grad(grads, params, grad_outputs=zs)` through the double-backward graph of the
convolutions and batch norms, keeping `p.hess` beside exp_avg and exp_avg_hessian. Data: uint8 batches of
40 x 3 x 224 x 224 made on the GPU and augmented as a batch by `torchvision.transforms.v2`
(`TrivialAugmentWide()` then `RandomErasing(p=0.5)` after `ToDtype(float32, scale=True)` and
`Normalize`); the augmentation op is drawn from the seeded CPU generator. Phase 1: 4 AdaHessian steps
(zero_grad(set_to_none=True) before each backward). Phase 2: the model converted to channels-last and
evaluated under `torch.inference_mode()` with bf16 autocast at batch 256, three batches. Seeded.
2 phases."""

import torch
import torchvision
from timm.optim import create_optimizer_v2
from torchvision.transforms import v2

torch.manual_seed(2834)
dev = "cuda"


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


augment = v2.Compose(
    [
        v2.TrivialAugmentWide(),
        v2.ToDtype(torch.float32, scale=True),
        v2.Normalize(mean=[0.485, 0.456, 0.406], std=[0.229, 0.224, 0.225]),
        v2.RandomErasing(p=0.5),
    ]
)
model = torchvision.models.regnet_x_1_6gf(weights=None, num_classes=100).to(dev)
optimizer = create_optimizer_v2(model, opt="adahessian", lr=0.15, weight_decay=5e-4)
print("second order", optimizer.is_second_order)
criterion = torch.nn.CrossEntropyLoss()

model.train()
for _step in range(4):
    x = augment(torch.randint(0, 256, (40, 3, 224, 224), dtype=torch.uint8, device=dev))
    y = torch.randint(0, 100, (40,), device=dev)
    loss = criterion(model(x), y)
    optimizer.zero_grad(set_to_none=True)
    loss.backward(create_graph=True)
    optimizer.step()
print("train", round(loss.item(), 3))
report("regnet_x_1_6gf_adahessian_fp32_create_graph")

del x, y, loss
optimizer.zero_grad(set_to_none=True)
model = model.to(memory_format=torch.channels_last).eval()
correct = 0
with torch.inference_mode(), torch.autocast("cuda", dtype=torch.bfloat16):
    for _b in range(3):
        x = torch.randn(256, 3, 224, 224, device=dev).contiguous(memory_format=torch.channels_last)
        correct += (model(x).argmax(-1) == torch.randint(0, 100, (256,), device=dev)).sum().item()
print("eval", correct)
report("regnet_x_1_6gf_channels_last_bf16_inference_mode")
