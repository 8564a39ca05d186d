"""A torchvision ResNet-50 rewritten by `torch.fx`: `symbolic_trace`d, every ReLU replaced in the
graph by a GELU, the `GraphModule` recompiled and trained (its generated forward frees each value
after its last use); batch 64 of 224x224, bf16 autocast, SGD with Nesterov momentum and label
smoothing 0.1, 2 steps; 3 phases."""

import os

import torch
import torch.fx
import torch.nn as nn
import torch.nn.functional as F
import torchvision

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(5402)
B, HW = (2, 64) if SMALL else (64, 224)
device = "cuda" if torch.cuda.is_available() else "cpu"
traced = torch.fx.symbolic_trace(torchvision.models.resnet50(num_classes=1000))
for node in traced.graph.nodes:
    if node.op == "call_module" and isinstance(traced.get_submodule(node.target), nn.ReLU):
        with traced.graph.inserting_after(node):
            gelu = traced.graph.call_function(F.gelu, node.args)
        node.replace_all_uses_with(gelu)
        traced.graph.erase_node(node)
traced.graph.lint()
traced.recompile()
model = traced.to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, nesterov=True)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    x = torch.randn(B, 3, HW, HW, device=device)
    y = torch.randint(0, 1000, (B,), device=device)
    with torch.autocast(device, dtype=torch.bfloat16):
        loss = F.cross_entropy(model(x), y, label_smoothing=0.1)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    del x, y, loss
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
