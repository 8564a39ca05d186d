"""Two-stream action recognition (Simonyan & Zisserman 2014, TSN-style RGB stream) with optical flow computed
on the fly by a frozen torchvision `raft_small` (random weights, `eval()`, `torch.no_grad()`, fp32,
`num_flow_updates=6`, the last of its predictions kept). Clips: 4 clips of 8 frames of 3 x 224 x 224 in
[-1, 1], 15 action classes. Flow stream: the 7 flows between consecutive frames, stacked to 14 channels
and clamped to +-20 px then scaled, into timm 1.0.29's `selecsls42b` created with `in_chans=14`. RGB
stream: every frame through timm's `repghostnet_100` (RepGhost, re-parameterisable), logits averaged
over the 8 frames (segmental consensus). The two streams' logits are summed (late fusion) and trained by
cross-entropy. Phase 1: building the three models and timm's `adanw` over both streams
(`create_optimizer_v2`, lr 1e-3, weight decay 0.02). Phase 2: 5 training steps under bf16 autocast for the
two streams (RAFT outside autocast). Phase 3: timm's `reparameterize_model(rgb)` (RepGhost branches fused
into single convs, a new module) and both streams in eval under `torch.inference_mode()` with fp16
autocast on 2 clips of 16 frames at 224, plus `torchvision.utils.flow_to_image` of the first clip's
flows (uint8 visualisation).
3 phases."""

import timm
import torch
import torch.nn.functional as F
from timm.optim import create_optimizer_v2
from timm.utils import reparameterize_model
from torchvision.models.optical_flow import raft_small
from torchvision.utils import flow_to_image

torch.manual_seed(2924)
dev = "cuda"
B, T, SIZE, NUM_CLASSES = 4, 8, 224, 15


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


raft = raft_small(weights=None).to(dev).eval()
for p in raft.parameters():
    p.requires_grad_(False)
flow_net = timm.create_model("selecsls42b", pretrained=False, in_chans=2 * (T - 1), num_classes=NUM_CLASSES)
rgb_net = timm.create_model("repghostnet_100", pretrained=False, num_classes=NUM_CLASSES)
flow_net, rgb_net = flow_net.to(dev), rgb_net.to(dev)
params = list(flow_net.parameters()) + list(rgb_net.parameters())
optimizer = create_optimizer_v2(params, "adanw", lr=1e-3, weight_decay=0.02)
print("params", sum(p.numel() for p in params), "raft", sum(p.numel() for p in raft.parameters()))
report("two_stream_build_raft_small_selecsls_repghost_adanw")


def clip_flows(clips):
    n, t = clips.shape[:2]
    first = clips[:, :-1].reshape(-1, 3, SIZE, SIZE)
    second = clips[:, 1:].reshape(-1, 3, SIZE, SIZE)
    with torch.no_grad():
        flows = raft(first, second, num_flow_updates=6)[-1]
    return flows.view(n, t - 1, 2, SIZE, SIZE)


def fused_logits(clips, flows, rgb):
    n, t = clips.shape[:2]
    flow_in = (flows.clamp(-20, 20) / 20).flatten(1, 2)
    flow_logits = flow_net(flow_in)
    rgb_logits = rgb(clips.flatten(0, 1)).view(n, t, -1).mean(1)
    return flow_logits + rgb_logits


flow_net.train()
rgb_net.train()
for _step in range(5):
    clips = torch.rand(B, T, 3, SIZE, SIZE, device=dev) * 2 - 1
    labels = torch.randint(0, NUM_CLASSES, (B,), device=dev)
    flows = clip_flows(clips)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        logits = fused_logits(clips, flows, rgb_net)
    loss = F.cross_entropy(logits.float(), labels)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
print("train loss", round(loss.item(), 4))
report("two_stream_train_bf16_raft_no_grad")

del clips, labels, flows, logits, loss
rgb_eval = reparameterize_model(rgb_net).eval()
flow_net.eval()
preds = []
with torch.inference_mode():
    for rep in range(2):
        clips = torch.rand(1, 16, 3, SIZE, SIZE, device=dev) * 2 - 1
        flows = clip_flows(clips)
        if rep == 0:
            vis = flow_to_image(flows[0])
        with torch.autocast("cuda", dtype=torch.float16):
            logits = sum(fused_logits(clips[:, s : s + T], flows[:, s : s + T - 1], rgb_eval) for s in (0, 8))
        preds.append(int(logits.argmax()))
print("eval", preds, tuple(vis.shape), vis.dtype)
report("two_stream_reparameterized_inference_fp16_flow_to_image")
