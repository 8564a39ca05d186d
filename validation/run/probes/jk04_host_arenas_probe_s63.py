"""Session 63 probe (blind270/jk04, timm's MobileNet-V5-300M built on the host, then `.to("cuda")`):
which of the model's CPU tensors glibc mapped on its own, and what lies in the gaps between them.

The twin's fit to jk04's H100 history (/work/gpu_s62/f/h/jk04.pickle.xz; `validation/run/probes/
host_layout_fit_s63.py`) puts every one of the first forty chunks of `.to("cuda")` where the GPU put
them only when (1) all 153 tensors this machine's glibc maps (1.88 MiB and up) are mapped on the GPU
too, not the 95 the twin's dynamic threshold (3,846,144 bytes, rule 7) keeps, and (2) three 1 MiB
ranges, held until the end of the load, lie among them (above the 37th, 86th and 138th tensor from
the top). On this machine (Python 3.11) those gaps are pymalloc arenas: the Python objects of the
modules (OrderedDicts, Parameters) fill 1 MiB arenas that `mmap` puts top-down among the tensors as
the build goes. This probe prints, on the GPU's machine (Python 3.12), the same view:

    python3 probes/jk04_host_arenas_probe_s63.py

Prints: the Python version, the number of tensors glibc mapped and their sizes, every gap between
two mapped tensors (its length, the index of the tensor below it from the top, and the Python objects
whose `id()` lies in it, by type), and after `.to("cuda")` the segments in creation order (offsets
from the first segment + 2 MiB, the anchor B when that segment is at B-2, as in jk04's history)."""

import ctypes
import gc
import sys
from collections import Counter

import timm
import torch
import torch.nn as nn
import torch.nn.functional as F  # noqa: F401  (the script's imports, in its order)
from timm.optim import create_optimizer_v2  # noqa: F401

if torch.cuda.is_available():
    # as history.py with CONTEXT=none did on the GPU (right after torch's import)
    torch.cuda.memory._record_memory_history(context=None, max_entries=2_000_000)

MIB = 1 << 20
torch.manual_seed(2704)


def glibc_len(ptr, nbytes):
    """The length of glibc's own mapping for the chunk at ptr (IS_MMAPPED in its size word), else
    None (`vramscope._capture._glibc_mapping`)."""
    if ptr % 4096 < 16:
        return None
    size = ctypes.c_size_t.from_address(ptr - 8).value
    prev = ctypes.c_size_t.from_address(ptr - 16).value
    if not size & 2:
        return None
    length = (size & ~7) + prev
    return length if length % 4096 == 0 and nbytes < length <= nbytes + MIB else None


encoder = timm.create_model("mobilenetv5_300m_enc", pretrained=False)
storages = {}
for t in list(encoder.parameters()) + list(encoder.buffers()):
    st = t.untyped_storage()
    storages[st.data_ptr()] = st.nbytes()
mapped = sorted(((p // 4096 * 4096, n) for p, s in storages.items() if (n := glibc_len(p, s))), reverse=True)
print("python", sys.version.split()[0], "torch", torch.__version__, "timm", timm.__version__)
print(f"tensors {len(storages)}, mapped by glibc {len(mapped)}, {sum(n for _, n in mapped) / MIB:.3f} MiB")
print("mapped sizes (MiB, top down):", Counter(round(n / MIB, 3) for _, n in mapped).most_common())
objs = gc.get_objects()
for j in range(1, len(mapped)):
    lo, hi = mapped[j][0] + mapped[j][1], mapped[j - 1][0]
    if hi != lo:
        inside = Counter(type(o).__name__ for o in objs if lo <= id(o) < hi)
        print(
            f"gap {(hi - lo) / MIB:.3f} MiB above tensor {j} ({mapped[j][1] / MIB:.3f} MiB), "
            f"{(mapped[0][0] + mapped[0][1] - hi) / MIB:.3f} MiB under the top;",
            f"objects {sum(inside.values())}:",
            inside.most_common(4),
        )
del objs
if torch.cuda.is_available():
    encoder = encoder.to("cuda")
    probe = nn.Linear(2048, 100).to("cuda")
    trace = torch.cuda.memory._snapshot()["device_traces"][0]
    segs = [(e["addr"], e["size"]) for e in trace if e["action"] == "segment_alloc"]
    base = segs[0][0] + 2 * MIB
    print(f"allocated {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    print("segments (B offset MiB, MiB):", [(round((a - base) / MIB), n // MIB) for a, n in segs])
