"""`torch.export.export` on the GPU: torchvision's resnet50 (fp32 weights, random init, eval mode).
Exported with an example input of batch 32 x 3 x 224 x 224; the exported program's `ep.module()` run
under no_grad at that shape; then `ep.run_decompositions()` (the core ATen decompositions: the eval
batch norms become their decomposed form) and its module run again; then a second export whose batch
dimension is a `torch.export.Dim("batch", min=2, max=128)`, its module run at batch 16 and 64.

No value-dependent sizes. 4 phases."""

import torch
import torchvision

torch.manual_seed(2464)


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


model = torchvision.models.resnet50().cuda().eval()
x = torch.randn(32, 3, 224, 224, device="cuda")
ep = torch.export.export(model, (x,))
report("export_static_batch32")

with torch.no_grad():
    out = ep.module()(x)
    del out
report("ep_module_inference_batch32")

core = ep.run_decompositions()
with torch.no_grad():
    out = core.module()(x)
    del out
report("run_decompositions_module_inference")

batch = torch.export.Dim("batch", min=2, max=128)
ep_dyn = torch.export.export(model, (x,), dynamic_shapes={"x": {0: batch}})
mod = ep_dyn.module()
with torch.no_grad():
    for b in (16, 64):
        out = mod(torch.randn(b, 3, 224, 224, device="cuda"))
        del out
report("dynamic_batch_export_batch16_and_64")
