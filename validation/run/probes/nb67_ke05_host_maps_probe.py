"""Session 67 probe (blind290/ke05: torchvision convnext_base built on the host, then
`.to("cuda", torch.bfloat16, memory_format=torch.channels_last)`; timm efficientformer_l1 built on the host
after the context exists, then `.to("cuda")`): the process's maps at each step of ke05's setup and first two
training steps, to settle where OpenMP's pool (started by the teacher's `trunc_normal_`, rule 17) put its
stacks and arenas and what fills the 64 MiB gaps between the arenas on the GPU.

ke05's H200 history (/work/notes/hist66/ke05_h200.pickle.xz, the H100 record's figures) against the twin's
(`--snapshot`): the same frees before each of the 19,480 allocations, and the same segment for every
allocation up to 1,312, where two equal 11,239,424-byte free blocks tie and the GPU's lies lower (segment 92:
B-6016 on the GPU, B+1472 in the twin; B = the first segment + 2 MiB, that segment at B-2). From B's
side, the segments lie where the twin puts them (the same B offsets) but for three things:
1. the 3rd to 5th `.to()` segments (2 MiB each) lie at B-422, -420, -418 on the GPU, B-416, -414, -412 in the
   twin: the driver pool's top 8 MiB (rule 14, session 21), not laid out;
2. `.to()`'s one chunk above the context (segment 23, 98 MiB, the teacher's first forward) lies at B+1536 on
   the GPU and B+2272 in the twin (the top of the freed teacher tensors, rule 17's layout), and no other
   chunk of the run goes above B+96 on the GPU, where the twin puts 24 into the 64 MiB gaps between the
   arenas (B+320 .. B+2112, 128 MiB apart; the same as blind274/jo05 and blind284/jy01);
3. the holes of segment 28's chunk (24 MiB at B-2360) and segment 23's (30 MiB above it) take none of the
   later 22 and 28 MiB segments on the GPU, as if 3 MiB or more of each were taken by mappings not in the
   trace (the driver's pinned 8.25 MiB mapping goes where rule 2 puts a 10 MiB segment, session 21).

    python3 probes/nb67_ke05_host_maps_probe.py > $OUT/nb67_ke05_host_maps_probe.txt   (from validation/run;
    about 15 s; OUT=... also saves the probe's own memory history as $OUT/nb67_ke05_probe_history.pickle)

Prints: torch's thread count and the task count at each view, then /proc/self/maps between B - 2,900 MiB
and the highest teacher tensor + 64 MiB at (a) after the teacher's build, (b) after its `.to()` (the
context's creation), (c) after the student's build, (d) after its `.to()`, (e1) after the teacher's stem
convolution (the process's first cuDNN convolution; a forward hook), (e2) after its avgpool (the first
`mean`, the first reduction), (e) after step 0's teacher forward, (f) after step 0's student forward and loss,
(g) after step 0 and (h) after step 1 (each mapping: offset from B in MiB, length, gap below it, perms,
what it is: a teacher tensor, the segments inside it with the free MiB between them, a file or anon);
then the mappings of 1 MiB or more (not files) that each `trunc_normal_` of the teacher's build added or
removed (which worker's arena comes at which op: the loops' task counts, 2, 4, 8 and 16 first at the Linear
128x512, the downsample convolution 256x128x2x2, the Linear 256x1024, the downsample 512x256x2x2), then
the segments in creation order (B offset, MiB, the allocation that made it). The `fig` lines
(allocated, reserved after each view) are the twin's too."""

import os
import pickle

import timm
import torch
import torch.nn.functional as F
from timm.optim import create_optimizer_v2
from timm.scheduler import StepLRScheduler
from torchvision.models import convnext_base

# as history.py did on the GPU (CONTEXT=none), right after torch's import
if torch.cuda.is_available():
    torch.cuda.memory._record_memory_history(context=None, max_entries=2_000_000)

MIB = 1 << 20
torch.manual_seed(2905)
dev = "cuda"
B_, NUM_CLASSES = 128, 1000
views = []


def read_maps():
    out = []
    with open("/proc/self/maps") as f:
        for line in f:
            parts = line.split()
            lo, hi = (int(x, 16) for x in parts[0].split("-"))
            out.append((lo, hi, parts[1], parts[5] if len(parts) > 5 else ""))
    return out


def segments():
    if not torch.cuda.is_available():
        return []
    trace = torch.cuda.memory._snapshot()["device_traces"][0]
    out, n = [], 0
    for e in trace:
        if e["action"] == "alloc":
            n += 1
        elif e["action"] == "segment_alloc":
            out.append((e["addr"], e["size"], n))
    return out


def view(tag):
    views.append((tag, read_maps(), len(os.listdir("/proc/self/task"))))
    if torch.cuda.is_available():
        print(f"fig {tag}: allocated {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")


build_steps = []  # (numel, tasks, mappings) after each trunc_normal_ of the teacher's build
_trunc_normal = torch.nn.init.trunc_normal_


def _traced_trunc_normal(tensor, *args, **kwargs):
    out = _trunc_normal(tensor, *args, **kwargs)
    build_steps.append((tensor.numel(), len(os.listdir("/proc/self/task")), read_maps()))
    return out


torch.nn.init.trunc_normal_ = _traced_trunc_normal
teacher = convnext_base(weights=None)
torch.nn.init.trunc_normal_ = _trunc_normal
big = sorted(
    (p.untyped_storage().data_ptr(), p.untyped_storage().nbytes(), n)
    for n, p in list(teacher.named_parameters()) + list(teacher.named_buffers())
)
print("torch threads", torch.get_num_threads(), "OMP", os.environ.get("OMP_NUM_THREADS"))
view("(a) after the teacher's build")
if not torch.cuda.is_available():
    raise SystemExit("no GPU: nothing to map")
teacher = teacher.to(dev, dtype=torch.bfloat16, memory_format=torch.channels_last).eval()
for p in teacher.parameters():
    p.requires_grad_(False)
view("(b) after the teacher's .to()")
student = timm.create_model(
    "efficientformer_l1", pretrained=False, num_classes=NUM_CLASSES, drop_path_rate=0.1
)
student.set_distilled_training(True)
view("(c) after the student's build")
student = student.to(dev)
optimizer = create_optimizer_v2(student, "nadamw", lr=2e-3, weight_decay=0.05)
scheduler = StepLRScheduler(optimizer, decay_t=4, decay_rate=0.5, warmup_t=2, warmup_lr_init=1e-5)
scaler = torch.amp.GradScaler("cuda")
view("(d) after the student's .to() and the optimizer")
hooks = [
    teacher.features[0][0].register_forward_hook(
        lambda *_: view("(e1) after the teacher's stem convolution")
    ),
    teacher.avgpool.register_forward_hook(
        lambda *_: view("(e2) after the teacher's avgpool (the first mean)")
    ),
]
mean = torch.tensor([0.485, 0.456, 0.406], device=dev).view(1, 3, 1, 1)
std = torch.tensor([0.229, 0.224, 0.225], device=dev).view(1, 3, 1, 1)
student.train()
for step in range(2):
    x = (torch.rand(B_, 3, 224, 224, device=dev) - mean) / std
    y = torch.randint(0, NUM_CLASSES, (B_,), device=dev)
    with torch.no_grad():
        t_logits = teacher(x.to(torch.bfloat16).contiguous(memory_format=torch.channels_last))
    if step == 0:
        for h in hooks:
            h.remove()
        view("(e) after step 0's teacher forward")
    with torch.autocast("cuda", dtype=torch.float16):
        out_cls, out_dist = student(x)
        loss = 0.5 * F.cross_entropy(out_cls, y, label_smoothing=0.1) + 0.5 * F.cross_entropy(
            out_dist, t_logits.argmax(-1)
        )
    if step == 0:
        view("(f) after step 0's student forward")
    optimizer.zero_grad(set_to_none=True)
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(student.parameters(), 5.0)
    scaler.step(optimizer)
    scaler.update()
    scheduler.step(step + 1)
    view(f"({'gh'[step]}) after step {step}")

segs = segments()
base = segs[0][0] + 2 * MIB  # the first segment at B-2 (ke05's GPU history)
lo_bound, hi_bound = base - 2900 * MIB, big[-1][0] + big[-1][1] + 64 * MIB
for tag, maps, tasks in views:
    print(f"== {tag}: B {base:#x}, tasks {tasks}")
    prev = None
    for lo, hi, perm, name in maps:
        if hi < lo_bound or lo > hi_bound:
            continue
        kind = "file " + name.rsplit("/", 1)[-1] if name.startswith("/") else (name or "anon")
        inside = [t for a, n, t in big if a < hi and a + n > lo]
        if inside:
            what = "teacher" if tag.startswith("(a)") else "in the freed teachers' range:"
            kind = f"{what} {inside[0]}" + (f" (+{len(inside) - 1})" if len(inside) > 1 else "")
        held = sorted((a, n) for a, n, _ in segs if lo <= a < hi)
        if held:
            at, free = lo, []
            for a, n in held:
                if a > at:
                    free.append(f"free {(at - base) / MIB:+.0f}:{(a - at) / MIB:.0f}")
                at = max(at, a + (n + 2 * MIB - 1) // (2 * MIB) * 2 * MIB)
            if hi > at:
                free.append(f"free {(at - base) / MIB:+.0f}:{(hi - at) / MIB:.0f}")
            kind += f" [{len(held)} segments; " + ", ".join(free) + "]"
        gap = (lo - prev) / MIB if prev is not None else 0.0
        print(f"  B{(lo - base) / MIB:+10.2f} len {(hi - lo) / MIB:9.3f} gap {gap:9.3f} {perm} {kind}")
        prev = hi
print("the teacher's build, after each trunc_normal_ (OpenMP's arenas: 64 MiB heaps of 2 x 64 MiB mappings):")
prev = set()
for k, (numel, tasks, maps) in enumerate(build_steps):
    now = {(lo, hi, perm, name) for lo, hi, perm, name in maps if hi - lo >= MIB and not name.startswith("/")}
    new, gone = sorted(now - prev), sorted(prev - now)
    if new or gone or k == 0:
        print(f"  trunc_normal_ {k} of {numel} elements, tasks {tasks}:")
        for lo, hi, perm, name in new:
            print(f"    + B{(lo - base) / MIB:+10.2f} len {(hi - lo) / MIB:9.3f} {perm} {name or 'anon'}")
        for lo, hi, perm, name in gone:
            print(f"    - B{(lo - base) / MIB:+10.2f} len {(hi - lo) / MIB:9.3f} {perm} {name or 'anon'}")
    prev = now
print("segments in creation order (B offset MiB, MiB, allocation):")
print([(f"{(a - base) / MIB:+.0f}", n // MIB, k) for a, n, k in segs])
if os.environ.get("OUT"):
    with open(os.path.join(os.environ["OUT"], "nb67_ke05_probe_history.pickle"), "wb") as f:
        pickle.dump(torch.cuda.memory._snapshot(), f)
