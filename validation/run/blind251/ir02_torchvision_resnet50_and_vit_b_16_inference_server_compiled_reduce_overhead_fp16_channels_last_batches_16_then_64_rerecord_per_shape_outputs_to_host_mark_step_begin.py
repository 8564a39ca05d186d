"""An image-classification server compiled for low latency: torchvision's ResNet-50 (fp16, channels-last) and
ViT-B/16 (fp16), each `torch.compile(mode="reduce-overhead")`, served under inference_mode at batch 16 (three
calls: warm-up, recording, replay) and then at batch 64 (a new shape: a recompile with a dynamic batch and its
own recording), each output's top-5 copied to the host before the next call, with
`torch.compiler.cudagraph_mark_step_begin()` before each request.

No value-dependent sizes. 4 phases."""

import torch
import torchvision

torch.manual_seed(2512)


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


resnet = torchvision.models.resnet50().cuda().half().eval().to(memory_format=torch.channels_last)
vit = torchvision.models.vit_b_16().cuda().half().eval()
report("setup")
servers = [torch.compile(resnet, mode="reduce-overhead"), torch.compile(vit, mode="reduce-overhead")]


def serve(batch, calls):
    results = []
    with torch.inference_mode():
        for _ in range(calls):
            x = torch.randn(batch, 3, 224, 224, device="cuda", dtype=torch.half)
            for srv in servers:
                torch.compiler.cudagraph_mark_step_begin()
                logits = srv(x.contiguous(memory_format=torch.channels_last) if srv is servers[0] else x)
                results.append(logits.float().topk(5).indices.cpu())
                del logits
            del x
    return results


r16 = serve(16, 3)
report("batch_16_warmup_record_replay")
r64 = serve(64, 3)
report("batch_64_recompile_record_replay")
r16b = serve(16, 2)
report("batch_16_again_replays")
