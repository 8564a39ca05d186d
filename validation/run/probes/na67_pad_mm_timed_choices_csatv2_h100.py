"""Probe (session 67, helper na): Inductor's pad_mm timing of blind283/jx05's 29 matmuls, on their own.

blind283/jx05 (timm CSATv2 under `torch.compile`, bf16 autocast, batch 64 x 3 x 512 x 512) ends its
phases with requested bytes equal to the H100's but allocated +2,449,408 and reserved -37,748,736 in
the twin: its end snapshot holds 20 oversized blocks (fp32 (1544, 386) and (768, 386) gradients of the
compiled backward and Lion's `exp_avg`), so blocks lie otherwise. Inductor's pad_mm
(torch/_inductor/fx_passes/pad_mm.py `_should_pad`) times these 29 matmuls of the joint graph (in the
twin's order, with the operands' sizes, strides, bias and exclude-padding flags the twin's pass saw)
and pads where `is_padded_faster` (ori_time > 1.1 x pad_time); the twin takes each as not padded.
This replays `_should_pad`'s timing with pad_mm's own functions: operands from `realize_tensor`
(`randn` of the strided extent, `as_strided`), pre-padded operands padded once outside the timing
(`write_pad` inside), the base time once per base key, `get_do_bench()` (`benchmark_gpu`, warmup 5).
One line a matmul: `i OP M K N pre1 pre2 padded BOOL bound BOOL` then the two times (ms) and their
ratio; `bound`: `is_mm_compute_bound`, without which Inductor times nothing and pads nothing. Decides
which of jx05's matmuls Inductor pads on the H100 (a ratio near 1.1 is a coin toss: say so), for the
twin's `_pad_mm._PADDED` table. Plain python3, < 30 s, < 1 GB. Under the twin (na-s67) each line
says `padded False`, its times the host's (meaningless).
"""

import torch
from torch._inductor.fx_passes import pad_mm as P

CASES = [
    # (op, mat1 size, stride, mat2 size, stride, bias (size, stride), mat1 pre-padded, mat2 pre-padded)
    ("mm", (3136, 3), (3, 1), (3, 1), (1, 1), None, True, True),
    ("mm", (3, 3136), (1, 3), (3136, 1), (1, 1), None, False, True),
    ("mm", (64, 64), (64, 1), (64, 49), (147, 3), None, True, False),
    ("mm", (49, 64), (3, 147), (64, 64), (64, 1), None, False, True),
    ("mm", (64, 49), (49, 1), (49, 64), (3, 147), None, True, False),
    ("mm", (64, 64), (1, 64), (64, 49), (49, 1), None, False, True),
    ("mm", (4, 3136), (1, 4), (3136, 1), (1, 1), None, False, True),
    ("mm", (3136, 4), (4, 1), (4, 1), (1, 1), None, True, True),
    ("mm", (1, 3136), (49, 1), (3136, 4), (4, 1), None, True, True),
    ("mm", (3136, 1), (1, 49), (1, 4), (4, 1), None, True, True),
    ("mm", (1544, 4096), (1, 1544), (4096, 386), (386, 1), None, False, True),
    ("mm", (4096, 1544), (1544, 1), (1544, 386), (386, 1), None, True, True),
    ("mm", (386, 4096), (1, 386), (4096, 1544), (1544, 1), None, False, True),
    ("mm", (4096, 386), (386, 1), (386, 1544), (1544, 1), None, True, True),
    ("mm", (4096, 768), (768, 1), (768, 386), (386, 1), None, True, True),
    ("mm", (768, 4096), (1, 768), (4096, 386), (386, 1), None, False, True),
    ("mm", (386, 4096), (1, 386), (4096, 256), (256, 1), None, False, True),
    ("mm", (4096, 386), (386, 1), (386, 256), (256, 1), None, True, True),
    ("mm", (1000, 64), (1, 1000), (64, 386), (386, 1), None, False, True),
    ("mm", (64, 1000), (1000, 1), (1000, 386), (386, 1), None, False, True),
    ("addmm", (64, 386), (386, 1), (386, 1000), (1, 386), ((1000,), (1,)), True, False),
    ("addmm", (4096, 1544), (1544, 1), (1544, 386), (1, 1544), ((386,), (1,)), True, False),
    ("addmm", (4096, 386), (386, 1), (386, 1544), (1, 386), ((1544,), (1,)), True, False),
    ("addmm", (4096, 256), (256, 1), (256, 386), (1, 256), ((386,), (1,)), True, False),
    ("mm", (4096, 386), (386, 1), (386, 768), (1, 386), None, True, False),
    ("addmm", (3136, 4), (4, 1), (4, 1), (1, 4), ((1,), (1,)), True, True),
    ("addmm", (3136, 1), (1, 1), (1, 4), (1, 1), ((4,), (1,)), True, True),
    ("mm", (64, 49), (147, 3), (49, 64), (3, 147), None, False, False),
    ("mm", (3136, 1), (1, 1), (1, 3), (1, 1), None, True, True),
]


def realize(size, stride):
    """`_should_pad`'s `realize_tensor` of a fake operand."""
    extent = sum((d - 1) * s for d, s in zip(size, stride, strict=True)) + 1
    return torch.as_strided(torch.randn(extent, dtype=torch.bfloat16, device="cuda"), size, stride)


def time_case(i, name, s1, st1, s2, st2, bias, pre1, pre2, base_times, do_bench):
    """`_should_pad`'s timing of one matmul, after its `is_mm_compute_bound` check."""
    op = getattr(torch.ops.aten, name)
    mat1, mat2 = realize(s1, st1), realize(s2, st2)
    m, k, n = s1[0], s1[1], s2[1]
    kp = P.get_padded_length(k, P.get_alignment_size(mat1))
    np_ = P.get_padded_length(n, P.get_alignment_size(mat2))
    mp = P.get_padded_length(m, P.get_alignment_size(mat1))
    base_key = (name, s1, st1, s2, st2, bias)
    ori_time = base_times.get(base_key)
    inp = realize(*bias) if bias is not None else None
    mat1_pad, mat2_pad, fns = mat1, mat2, []
    if pre1 and (mp or kp):
        mat1_pad = P.pad_mat1(mat1_pad, m_padded_length=mp, k_padded_length=kp)
        fns.append(lambda: mat1_pad[-mp:, -kp:].fill_(0))
    if pre2 and (kp or np_):
        mat2_pad = P.pad_mat2(mat2_pad, k_padded_length=kp, n_padded_length=np_)
        fns.append(lambda: mat2_pad[-kp:, -np_:].fill_(0))
    if name == "addmm":
        inp_pad = torch.randn_like(inp) if inp is not None else None
        fns.append(
            lambda: P.pad_addmm(
                inp_pad, mat1_pad, mat2_pad, mp, kp, np_, mat1_pre_padded=pre1, mat2_pre_padded=pre2
            )
        )
    else:
        fns.append(
            lambda: P.pad_mm(mat1_pad, mat2_pad, mp, kp, np_, mat1_pre_padded=pre1, mat2_pre_padded=pre2)
        )

    def orig():
        return op(mat1, mat2) if name == "mm" else op(inp, mat1, mat2)

    def padded_fn():
        for fn in fns:
            fn()

    if ori_time is None:
        ori_time = do_bench(orig)
        base_times[base_key] = ori_time
    pad_time = do_bench(padded_fn)
    padded = ori_time > pad_time * 1.1
    bound = P.is_mm_compute_bound(m, k, n, torch.bfloat16)
    times = f"{ori_time:.4f} {pad_time:.4f} {ori_time / pad_time:.3f}"
    print(i, name, m, k, n, pre1, pre2, "padded", padded, "bound", bound, times, flush=True)


do_bench = P.get_do_bench()
base_times = {}
for i, case in enumerate(CASES):
    time_case(i, *case, base_times, do_bench)
