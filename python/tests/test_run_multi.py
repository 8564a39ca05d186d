"""`vramscope run --nproc 2` on validation/multi's unmodified torchrun script, rank 0, held to what
rank 0 of 2 H200s recorded (fixtures/multi/multi_h200_n2.jsonl): every phase of an FSDP2 and a DDP
training run."""

from __future__ import annotations

import json

import pytest
from conftest import FIXTURES, ROOT, run_script

KEYS = ("allocated_bytes", "peak_allocated_bytes", "reserved_bytes", "peak_reserved_bytes")


def _gpu(case: str, rank: int) -> dict:
    rows = (
        json.loads(line) for line in (FIXTURES / "multi" / "multi_h200_n2.jsonl").read_text().splitlines()
    )
    return {r["phase"]: r for r in rows if r["case"] == case and r["rank"] == rank and "allocated_bytes" in r}


@pytest.mark.parametrize(
    ("case", "exact_phases"),
    [
        # measured here: every phase byte-exact (fsdp), all but the two later optimizer steps' peaks (ddp)
        ("fsdp_llama_fp32", 13),
        ("ddp_llama_fp32", 11),
    ],
)
def test_rank0_of_two(case, exact_phases, tmp_path):
    script = ROOT / "validation" / "multi" / "multi_cases.py"
    cases = ROOT / "validation" / "multi" / "multi_cases.json"
    status, _lines, _report, err = run_script(
        script, str(cases), case, str(tmp_path), extra=("--gpu", "h200", "--nproc", "2", "--rank", "0")
    )
    assert status == 0, err[-3000:]
    twin = [json.loads(line) for line in (tmp_path / f"{case}.rank0.jsonl").read_text().splitlines()]
    gpu = _gpu(case, 0)
    phases = [t for t in twin if t["phase"] in gpu]
    assert len(phases) == len(gpu) == 13  # load, then forward, backward, step, zero_grad of 3 steps
    exact = 0
    for t in phases:
        g = gpu[t["phase"]]
        assert abs(t["peak_allocated_bytes"] - g["peak_allocated_bytes"]) <= 0.005 * g["peak_allocated_bytes"]
        assert abs(t["peak_reserved_bytes"] - g["peak_reserved_bytes"]) <= 0.02 * g["peak_reserved_bytes"]
        exact += all(t[k] == g[k] for k in KEYS)
    assert exact >= exact_phases


def test_rank_outside_the_world_is_refused(tmp_script):
    script = tmp_script("print('never')\n")
    status, lines, _report, err = run_script(script, extra=("--nproc", "2", "--rank", "2"))
    assert status == 2 and "expected 0 <= rank < nproc" in err and not lines


def test_fused_adamw_under_fsdp_runs_and_agrees_with_estimate(tmp_path):
    # AdamW(fused=True) over FSDP2's DTensors: its `step` tensors are plain device tensors, grouped
    # with the DTensors as on a GPU; every phase of rank 0 as `estimate --fsdp 2` answers it
    # (fixtures/multi/answers_s7_h200_n2.jsonl; no 2-GPU machine has run this case yet)
    case = "fsdp_llama_bf16_adamw_fused"
    script = ROOT / "validation" / "multi" / "multi_cases.py"
    cases = ROOT / "validation" / "multi" / "multi_cases_s7.json"
    status, _lines, _report, err = run_script(
        script, str(cases), case, str(tmp_path), extra=("--gpu", "h200", "--nproc", "2", "--rank", "0")
    )
    assert status == 0, err[-3000:]
    twin = {
        r["phase"]: r
        for r in map(json.loads, (tmp_path / f"{case}.rank0.jsonl").read_text().splitlines())
        if "allocated_bytes" in r
    }
    rows = map(json.loads, (FIXTURES / "multi" / "answers_s7_h200_n2.jsonl").read_text().splitlines())
    est = [r for r in rows if r["case"] == case and r["rank"] == 0 and "allocated_bytes" in r]
    assert len(est) == 13
    for e in est:
        assert all(twin[e["phase"]][k] == e[k] for k in KEYS), e["phase"]


#: the opening lines of an FSDP2 script run under the fake process group
_FSDP2_HEADER = (
    "import torch, torch.nn as nn, torch.distributed as dist\n"
    "from torch.distributed.device_mesh import init_device_mesh\n"
    "from torch.distributed.fsdp import fully_shard\n"
    "torch.cuda.set_device(0)\n"
    "dist.init_process_group('nccl')\n"
)


def test_fully_shard_frees_the_full_parameter_copies_first_to_last(tmp_script):
    # the moved Parameters are the module's own (as `param.data = param.to(device)` keeps them on a
    # GPU), so `contract`'s OrderedDict of them is their last holder and frees them in order, as every
    # rank of every FSDP2 trace in fixtures/multi/traces_*.tar.xz does (a list would free them last first)
    script = tmp_script(
        _FSDP2_HEADER + "mesh = init_device_mesh('cuda', (2,))\n"
        "m = nn.Sequential(nn.Linear(256, 512), nn.Linear(512, 1024))\n"
        "torch.cuda.memory._record_memory_history(max_entries=100000)\n"
        "fully_shard(m, mesh=mesh)\n"
        "trace = torch.cuda.memory._snapshot()['device_traces'][0]\n"
        "print('FREED', [e['size'] for e in trace if e['action'] == 'free_requested'])\n"
    )
    status, lines, _report, err = run_script(script, extra=("--gpu", "h200", "--nproc", "2", "--rank", "0"))
    assert status == 0, err[-3000:]
    freed = next(line for line in lines if line.startswith("FREED"))
    # 0.weight, 0.bias, 1.weight, 1.bias (float32)
    assert freed == "FREED [524288, 2048, 2097152, 4096]"


def test_to_empty_converts_a_tied_dtensor_parameter_once_per_module_keeping_the_tie(tmp_script):
    # nn.Module._apply swaps a wrapper subclass's result into the Parameter (`swap_tensors`), so a
    # Parameter two modules share stays one and each module's visit makes a new `empty_like`, the
    # previous one freed at the swap (blind348/mm01's H100 record: its tied FSDP2 embedding and
    # lm_head, phase-0 peak 206,045,184 bytes above allocated, one float32 50,304 x 1,024 weight)
    script = tmp_script(
        _FSDP2_HEADER + "mesh = init_device_mesh('cuda', (1,))\n"
        "class M(nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.wte = nn.Embedding(1024, 1024)\n"
        "        self.mid = nn.Linear(1024, 1024)\n"
        "        self.head = nn.Linear(1024, 1024, bias=False)\n"
        "        self.head.weight = self.wte.weight\n"
        "with torch.device('meta'):\n"
        "    m = M()\n"
        "fully_shard(m.mid, mesh=mesh)\n"
        "fully_shard(m, mesh=mesh)\n"
        "m.to_empty(device='cuda')\n"
        "c = torch.cuda\n"
        "print('TIED', m.head.weight is m.wte.weight, c.memory_allocated(), c.max_memory_allocated())\n"
    )
    status, lines, _report, err = run_script(script, extra=("--gpu", "h100"))
    assert status == 0, err[-3000:]
    # the 4 MiB weight and the 4 MiB + 4 KiB Linear stay; the weight's second `empty_like` (lm_head's
    # turn) lives beside its first until the swap
    assert next(line for line in lines if line.startswith("TIED")) == "TIED True 8392704 12587008"


def test_a_single_process_nccl_group_runs_on_the_fake_group():
    # blind67/bo04: DDP over `init_process_group("nccl", world_size=1)` without torchrun or `--nproc`;
    # every phase as the H200 ran it (fixtures/run/run_blind67_h200.jsonl)
    script = ROOT / "validation" / "run" / "blind67" / "bo04_ddp_single_process_bucket_mlp.py"
    status, _lines, report, err = run_script(script, extra=("--gpu", "h200"))
    assert status == 0, err[-3000:]
    rows = (
        json.loads(line) for line in (FIXTURES / "run" / "run_blind67_h200.jsonl").read_text().splitlines()
    )
    gpu = [r for r in rows if r["script"] == "bo04_ddp_single_process_bucket_mlp"]
    twin = report["phases"]
    assert (
        [t["name"] for t in twin]
        == [g["phase"] for g in gpu]
        == ["phase0", "phase1", "phase2", "phase3", "end"]
    )
    keys = ("allocated", "peak_allocated", "reserved", "peak_reserved")
    for t, g in zip(twin, gpu, strict=True):
        assert [t[k] for k in keys] == [g[k] for k in keys], t["name"]


def test_ddp_compress_hooks_read_the_allreduce_future_value(tmp_script):
    # blind148/er02: fp16_compress_hook reads `fut.value()[0]` of its allreduce's future, which
    # ProcessGroupNCCL completes with the collective's tensors; the fake group's future had no value
    # ("'NoneType' object is not subscriptable" in the first backward)
    script = tmp_script(
        "import os, torch, torch.nn as nn, torch.distributed as dist\n"
        "from torch.distributed.algorithms.ddp_comm_hooks import default_hooks\n"
        "from torch.nn.parallel import DistributedDataParallel as DDP\n"
        "os.environ.update(MASTER_ADDR='localhost', MASTER_PORT='29531')\n"
        "dist.init_process_group('nccl', rank=0, world_size=1)\n"
        "for hook in (default_hooks.fp16_compress_hook, default_hooks.bf16_compress_hook,\n"
        "             default_hooks.allreduce_hook):\n"
        "    m = DDP(nn.Linear(1024, 1024).cuda(), device_ids=[0])\n"
        "    m.register_comm_hook(None, hook)\n"
        "    m(torch.randn(64, 1024, device='cuda')).sum().backward()\n"
        "    w = dist.all_reduce(torch.ones(4, device='cuda'), async_op=True)\n"
        "    print('VALUE', hook.__name__, [tuple(t.shape) for t in w.get_future().wait()])\n"
        "dist.destroy_process_group()\n"
    )
    status, lines, _report, err = run_script(script, extra=("--gpu", "h200"))
    assert status == 0, err[-3000:]
    assert [line for line in lines if line.startswith("VALUE")] == [
        "VALUE fp16_compress_hook [(4,)]",
        "VALUE bf16_compress_hook [(4,)]",
        "VALUE allreduce_hook [(4,)]",
    ]


def test_async_collective_tensors_stay_on_the_group_s_shelf_until_its_next_collective(tmp_script):
    # blind339/mb01: ProcessGroupNCCL stashes an asynchronous collective's tensors on its work and
    # releases them at `work.wait()` or at the group's next collective (`workEnqueue`'s
    # `shelvesToUnstash_`), never when the program drops them: bf16_compress_hook's bf16 copy of a
    # bucket outlives the hook (the GPU held 252,917,760 bytes of them after the DDP model was
    # deleted, the twin none)
    script = tmp_script(
        "import os, torch, torch.nn as nn, torch.distributed as dist\n"
        "from torch.distributed.algorithms.ddp_comm_hooks import default_hooks\n"
        "from torch.nn.parallel import DistributedDataParallel as DDP\n"
        "os.environ.update(MASTER_ADDR='localhost', MASTER_PORT='29533')\n"
        "dist.init_process_group('nccl', rank=0, world_size=1)\n"
        "sub = dist.new_group([0])\n"
        "m = DDP(nn.Linear(1024, 1024).cuda(), device_ids=[0])\n"
        "last = []\n"
        "def hook(state, bucket):\n"
        "    last[:] = [bucket.buffer().numel()]\n"
        "    return default_hooks.bf16_compress_hook(state, bucket)\n"
        "m.register_comm_hook(None, hook)\n"
        "m(torch.randn(64, 1024, device='cuda')).sum().backward()\n"
        "small = torch.ones(4, device='cuda')\n"
        "a = torch.cuda.memory_allocated()\n"
        "dist.all_reduce(small, group=sub)\n"
        "b = torch.cuda.memory_allocated()\n"
        "dist.all_reduce(small)\n"
        "c = torch.cuda.memory_allocated()\n"
        "print('HOOK', last[0] * 2, a - b, b - c)\n"
        "t = torch.ones(1 << 20, device='cuda')\n"
        "w = dist.all_reduce(t, async_op=True)\n"
        "a = torch.cuda.memory_allocated()\n"
        "del t, w\n"
        "b = torch.cuda.memory_allocated()\n"
        "dist.all_reduce(small)\n"
        "print('DROP', a - b, b - torch.cuda.memory_allocated())\n"
        "t = torch.ones(1 << 20, device='cuda')\n"
        "w = dist.all_reduce(t, async_op=True)\n"
        "a = torch.cuda.memory_allocated()\n"
        "w.wait()\n"
        "del t, w\n"
        "print('WAIT', a - torch.cuda.memory_allocated())\n"
        "t = torch.ones(1 << 20, device='cuda')\n"
        "a = torch.cuda.memory_allocated()\n"
        "dist.all_reduce(t)\n"
        "del t\n"
        "print('SYNC', a - torch.cuda.memory_allocated())\n"
        "dist.destroy_process_group()\n"
    )
    status, lines, _report, err = run_script(script, extra=("--gpu", "h100"))
    assert status == 0, err[-3000:]
    # the last bucket's bf16 copy (4,198,400 bytes, a multiple of 512) goes at the default group's
    # next collective, not at another group's
    # (a waited work's tensor lives on with the work, its `outputs_`, as on the GPU)
    assert [line for line in lines if line[:4] in ("HOOK", "DROP", "WAIT", "SYNC")] == [
        "HOOK 2099200 0 2099200",
        "DROP 0 4194304",
        "WAIT 4194304",
        "SYNC 4194304",
    ]


def test_ddp_runs_under_a_dispatch_mode_above_the_twin(tmp_script):
    # validation/run/ops_truth.py's recorder over blind148's DDP scripts: the mode calls each op
    # from Python with its dispatch-level arguments, where C++'s `t.to(param.device())` in DDP's
    # `_verify_params_across_processes` names the simulated device as meta; the twin took that for
    # the program's own meta device, and `.item()` of the gathered sizes raised on a meta tensor
    body = (
        "import os, torch, torch.nn as nn, torch.distributed as dist\n"
        "from torch.nn.parallel import DistributedDataParallel as DDP\n"
        "from torch.utils._python_dispatch import TorchDispatchMode\n"
        "class Calls(TorchDispatchMode):\n"
        "    def __torch_dispatch__(self, func, types, args=(), kwargs=None):\n"
        "        return func(*args, **(kwargs or {}))\n"
        "os.environ.update(MASTER_ADDR='localhost', MASTER_PORT='29533')\n"
        "dist.init_process_group('nccl', rank=0, world_size=1)\n"
        "with MODE:\n"
        "    m = DDP(nn.Linear(1024, 1024).cuda(), device_ids=[0])\n"
        "    m(torch.randn(64, 1024, device='cuda')).sum().backward()\n"
        "    print('ALLOCATED', torch.cuda.memory_allocated(), torch.empty(3, device='meta').device)\n"
        "dist.destroy_process_group()\n"
    )
    seen = []
    for mode in ("Calls()", "__import__('contextlib').nullcontext()"):
        status, lines, _report, err = run_script(
            tmp_script(body.replace("MODE", mode)), extra=("--gpu", "h200")
        )
        assert status == 0, err[-3000:]
        seen += [line for line in lines if line.startswith("ALLOCATED")]
    # the recorder changes nothing the twin allocates; the program's own meta tensor stays meta
    assert len(seen) == 2 and seen[0] == seen[1] and seen[0].endswith(" meta"), seen


SPAWNED = """
import os, sys
import torch, torch.distributed as dist, torch.multiprocessing as mp

def worker(rank, world, tag):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT="29512")
    dist.init_process_group("nccl", rank=rank, world_size=world)
    torch.cuda.set_device(rank)
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(256, 256).cuda(rank), device_ids=[rank])
    model(torch.randn(32, 256, device=rank)).sum().backward()
    print(tag, rank, dist.get_world_size(), torch.cuda.max_memory_allocated())
    dist.destroy_process_group()

if __name__ == "__main__":
    mp.spawn(worker, args=(torch.cuda.device_count(), "ran"), nprocs=torch.cuda.device_count())
"""


@pytest.mark.parametrize(("extra", "rank", "world"), [((), 0, 1), (("--nproc", "2", "--rank", "1"), 1, 2)])
def test_ranks_started_by_mp_spawn_run_under_the_twin(tmp_script, extra, rank, world):
    # PyTorch's DDP tutorial starts its ranks with `mp.spawn(fn, nprocs=device_count())`: the spawned
    # processes ran outside the twin ("ProcessGroupNCCL is only supported with GPUs"); the rank the
    # run simulates now calls `fn` in the twin's process, on the device index it names (rank 1's
    # `device_ids=[1]` went through `torch.accelerator.device_index(1)`, which asked the real driver)
    status, lines, report, err = run_script(tmp_script(SPAWNED), extra=extra)
    assert status == 0, err[-3000:]
    tag, got_rank, got_world, peak = lines[-1].split()
    assert (tag, int(got_rank), int(got_world)) == ("ran", rank, world)
    assert int(peak) == report["peak_allocated"] > 0


TENSOR_PARALLEL = """
import os
import torch, torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

dist.init_process_group("nccl")
mesh = init_device_mesh("cuda", (int(os.environ["WORLD_SIZE"]),))
mlp = torch.nn.Sequential(torch.nn.Linear(256, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 256)).cuda()
mlp = parallelize_module(mlp, mesh, {"0": ColwiseParallel(), "2": RowwiseParallel()})
mlp(torch.randn(32, 256, device="cuda")).sum().backward()
print("ran", mlp[0].weight.to_local().shape[0], mlp[0].weight.grad.device)
"""


def test_tensor_parallel_layers_backpropagate_under_the_twin(tmp_script):
    # a tensor-parallel parameter is a DTensor in the autograd graph, and RowwiseParallel's output an
    # AsyncCollectiveTensor: made on a real CUDA device, their gradient accumulators and outputs asked
    # autograd for that device's stream (`InputMetadata`), and the process aborted without a traceback
    status, lines, report, err = run_script(tmp_script(TENSOR_PARALLEL), extra=("--nproc", "2"))
    assert status == 0, err[-3000:]
    assert lines[-1] == "ran 512 cuda:0"  # rank 0 holds half of the column-parallel rows
    assert report["peak_allocated"] > 0


SEQUENCE_PARALLEL_NORM = """
import os
import torch, torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor.parallel import SequenceParallel, parallelize_module

dist.init_process_group("nccl")
mesh = init_device_mesh("cuda", (int(os.environ["WORLD_SIZE"]),))
norm = parallelize_module(torch.nn.RMSNorm(1024).cuda(), mesh, SequenceParallel())
x = torch.randn(4, 512, 1024, device="cuda", requires_grad=True)
base = torch.cuda.memory_allocated()
y = norm(x)
held = torch.cuda.memory_allocated() - base
y.to_local().sum().backward()
print("ran", type(y.grad_fn).__name__ if y.grad_fn else None, held, tuple(x.grad.shape))
"""


def test_sequence_parallel_rms_norm_takes_the_fused_kernel(tmp_script):
    # blind339/mb03 (torchtitan's SequenceParallel norms): `rms_norm` of a DTensor calls
    # `_fused_rms_norm` on it (layer_norm.cpp), which DTensor runs on the local tensor
    # (`fused_rms_norm_strategy`, _math_ops.py): the output and the (rows, 1) fp32 rstd are all it
    # holds. The meta composite also kept x * rstd for the weight's product (the GPU's peak was 13
    # norms x 24 MiB below the twin's)
    status, lines, _report, err = run_script(tmp_script(SEQUENCE_PARALLEL_NORM), extra=("--nproc", "2"))
    assert status == 0, err[-3000:]
    rows = 4 * 512  # SequenceParallel takes the local input as this rank's Shard(1) as it is
    assert lines[-1] == f"ran FusedRmsNormBackward0 {rows * 1024 * 4 + rows * 4} (4, 512, 1024)"


DTENSOR_RMS_NORM = """
import os
import torch, torch.distributed as dist, torch.nn.functional as F
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import Replicate, Shard, distribute_tensor

dist.init_process_group("nccl")
mesh = init_device_mesh("cuda", (int(os.environ["WORLD_SIZE"]),))
x = distribute_tensor(torch.randn(4, 512, 1024, device="cuda", requires_grad=True), mesh, [Shard(1)])
w = distribute_tensor(torch.ones(1024, device="cuda", requires_grad=True), mesh, [Replicate()])
base = torch.cuda.memory_allocated()
y = F.rms_norm(x, (1024,), w)
held = torch.cuda.memory_allocated() - base
torch.cuda.reset_peak_memory_stats()
y.to_local().sum().backward()
print("ran", type(y.grad_fn).__name__, held, torch.cuda.max_memory_allocated() - base)
"""


def test_dtensor_rms_norm_backward_copies_the_expanded_gradient(tmp_script):
    # FusedRmsNormBackward0 calls `_fused_rms_norm_backward` on the DTensors, which DTensor runs on
    # the local tensors (`fused_rms_norm_bwd_strategy`, _math_ops.py); the CUDA kernel makes dY
    # contiguous, and a `sum()`'s gradient is expanded: the backward's peak holds dX, dgamma and the
    # copy of dY (the H100's dt75 probe, a world of one: 25,179,136 for (4, 512, 1024) float32)
    status, lines, _report, err = run_script(tmp_script(DTENSOR_RMS_NORM), extra=("--nproc", "2"))
    assert status == 0, err[-3000:]
    local, rstd = 4 * 256 * 1024 * 4, 4 * 256 * 4  # rank 0's Shard(1)
    held = local + rstd
    # dX, dY's copy, dgamma, then the sum's output and its gradient (512 bytes each)
    assert lines[-1] == f"ran FusedRmsNormBackward0 {held} {held + 2 * local + 4096 + 1024}"


DTENSOR_OPS = """
import os, sys
import torch, torch.distributed as dist, torch.nn.functional as F
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import Shard, distribute_tensor

dist.init_process_group("nccl")
mesh = init_device_mesh("cuda", (int(os.environ["WORLD_SIZE"]),))
x = distribute_tensor(torch.randn(4, 512, 1024, device="cuda", requires_grad=True), mesh, [Shard(1)])
base = torch.cuda.memory_allocated()
torch.cuda.reset_peak_memory_stats()
y = getattr(F, sys.argv[1])(x)
held = torch.cuda.memory_allocated() - base
peak = torch.cuda.max_memory_allocated() - base
y.to_local().sum().backward()
print("ran", type(y.grad_fn).__name__, held, peak)
"""


def test_dropout_of_a_dtensor_takes_the_fused_kernel(tmp_script):
    # Dropout.cpp's `is_fused_kernel_acceptable` reads `input.is_cuda()`, true for a DTensor on the
    # GPU: `native_dropout`, which DTensor runs on the local tensor, NativeDropoutBackward0 saving
    # its bool mask. As a meta wrapper it took `_dropout_impl`: a noise tensor like the input, kept
    # by MulBackward0
    status, lines, _report, err = run_script(tmp_script(DTENSOR_OPS), "dropout", extra=("--nproc", "2"))
    assert status == 0, err[-3000:]
    local = 4 * 256 * 1024  # rank 0's Shard(1) of the (4, 512, 1024) input
    assert lines[-1] == f"ran NativeDropoutBackward0 {local * 4 + local} {local * 4 + local}"


def test_dtensor_sharding_propagation_by_decomposition_holds_no_device_memory(tmp_script):
    # an op without a DTensor strategy (mish) has its sharding found by running its decomposition
    # on meta tensors DTensor makes itself, once per candidate placement
    # (`DecompShardingStrategy._propagate_through_decomp`): they hold no GPU memory, so the
    # forward's peak is the local output. They were counted as the simulated device's (softplus's
    # exp, log1p and where per candidate: a peak of 4.25 outputs)
    status, lines, _report, err = run_script(tmp_script(DTENSOR_OPS), "mish", extra=("--nproc", "2"))
    assert status == 0, err[-3000:]
    local = 4 * 256 * 1024 * 4
    assert lines[-1] == f"ran MishBackward0 {local} {local}"


def test_the_wrapper_autograd_rule_covers_every_op_whose_cuda_and_meta_autograd_kernels_differ():
    # `_capture._autograd_meta` is registered for `_meta_composite_ops`: every aten op whose
    # computed AutogradCUDA kernel differs from its AutogradMeta one (ATen's test ops aside), read
    # from the dispatcher's tables as a wrapper of meta tensors would meet them
    import torch
    from vramscope import _capture

    differ = set()
    for name in torch._C._dispatch_get_all_op_names():
        if not name.startswith("aten::") or name.startswith("aten::_test_"):
            continue
        table = dict(
            line.split(": ", 1) for line in torch._C._dispatch_dump_table(name).splitlines() if ": " in line
        )
        cuda, meta = table.get("AutogradCUDA"), table.get("AutogradMeta")
        if cuda != meta and not ("backend fallback" in str(cuda) and "backend fallback" in str(meta)):
            differ.add(name)
    assert differ == set(_capture._meta_composite_ops()) == {"aten::_fused_rms_norm", "aten::mish_backward"}


OBJECTS = """
import os, torch, torch.distributed as dist
os.environ.setdefault("MASTER_ADDR", "127.0.0.1"); os.environ.setdefault("MASTER_PORT", "29544")
rank, world = int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))
dist.init_process_group("nccl", rank=rank, world_size=world)
metrics = {"loss": 1.5, "n": 32}
out = [None] * dist.get_world_size()
dist.all_gather_object(out, metrics)
got = [None] * dist.get_world_size()
dist.gather_object(metrics, got, dst=0)
print("ran", out == got == [metrics] * dist.get_world_size())
"""


@pytest.mark.parametrize("extra", [(), ("--nproc", "2")])
def test_object_collectives_give_every_rank_this_rank_s_object(tmp_script, extra):
    # all_gather_object / gather_object pickle into device byte tensors that the fake group does not
    # move: unpickling the stand-in zeros raised ("invalid load key"), even in a one-process group
    status, lines, _report, err = run_script(tmp_script(OBJECTS), extra=extra)
    assert status == 0, err[-3000:]
    assert lines[-1] == "ran True"


MESH_ONLY = """
import os, torch
os.environ.setdefault("RANK", "0"); os.environ.setdefault("WORLD_SIZE", "1")
os.environ.setdefault("MASTER_ADDR", "127.0.0.1"); os.environ.setdefault("MASTER_PORT", "29545")
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor.parallel import ColwiseParallel, parallelize_module
mesh = init_device_mesh("cuda", (1,))
lin = parallelize_module(torch.nn.Linear(256, 512).cuda(), mesh, ColwiseParallel())
lin(torch.randn(8, 256, device="cuda")).sum().backward()
print("ran", mesh.size(), lin.weight.grad.shape[0])
"""


@pytest.mark.parametrize("extra", [(), ("--nproc", "2")])
def test_init_device_mesh_starts_the_group_itself_under_the_twin(tmp_script, extra):
    # torchtitan's layout: no init_process_group of the script's own, init_device_mesh calls
    # device_mesh's imported `init_process_group()`, which made a real NCCL group ("ProcessGroupNCCL
    # is only supported with GPUs, no GPUs found!")
    src = MESH_ONLY if not extra else MESH_ONLY.replace("(1,)", '(int(os.environ["WORLD_SIZE"]),)')
    status, lines, report, err = run_script(tmp_script(src), extra=extra)
    assert status == 0, err[-3000:]
    assert lines[-1] == ("ran 1 512" if not extra else "ran 2 512")
    assert report["peak_allocated"] > 0


AUTOCAST_TP = """
import os, torch
os.environ.setdefault("RANK", "0"); os.environ.setdefault("WORLD_SIZE", "1")
os.environ.setdefault("MASTER_ADDR", "127.0.0.1"); os.environ.setdefault("MASTER_PORT", "29546")
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor.parallel import ColwiseParallel, parallelize_module
mesh = init_device_mesh("cuda", (1,))
lin = parallelize_module(torch.nn.Linear(1024, 4096, bias=False).cuda(), mesh, ColwiseParallel())
x = torch.randn(2048, 1024, device="cuda")
x[:8] @ x[:8].t()  # the first matmul's cuBLAS workspace, outside the figure
torch.cuda.reset_peak_memory_stats()
base = torch.cuda.memory_allocated()
with torch.autocast("cuda", dtype=torch.bfloat16):
    y = lin(x)
print("ran", y.dtype, torch.cuda.max_memory_allocated() - base)
"""


def test_autocast_casts_a_tensor_parallel_linear_s_dtensors(tmp_script):
    # autocast's `is_eligible` asks `is_cuda()`, which a DTensor on the GPU answers yes: its input and
    # weight are cast to bf16 and the matmul runs in bf16 (blind232/hx03's per-op truth); the twin's
    # DTensors, made on the meta device, were left fp32 and the output took fp32's bytes
    status, lines, _report, err = run_script(tmp_script(AUTOCAST_TP))
    assert status == 0, err[-3000:]
    # the input's bf16 copy 4 MiB, the weight's (cached) 8 MiB, the bf16 output 16 MiB
    assert lines[-1] == f"ran torch.bfloat16 {(4 + 8 + 16) << 20}"


@pytest.mark.parametrize(
    ("nproc", "backend", "named", "barrier"),
    [
        (None, "'nccl'", "nccl", True),
        (2, "'nccl'", "nccl", True),
        # torchrun's `init_process_group()`: "undefined", CUDA alone through NCCL
        (None, "None", "undefined", True),
        # a CPU backend beside NCCL takes the barrier (`_get_object_coll_device`)
        (None, "'cuda:nccl,cpu:gloo'", "cuda:nccl,cpu:gloo", False),
    ],
)
def test_nccl_barrier_and_list_all_gather_allocate_as_process_group_nccl_does(
    tmp_script, nproc, backend, named, barrier
):
    # ProcessGroup.hpp: a CUDA barrier keeps a `static` empty({1}, kByte) on the device, and
    # ProcessGroupNCCL.cpp's barrier all-reduces a zeros({1}, kFloat) it frees on return (the first
    # small blocks: a 2 MiB segment); allgather into a same-size list gathers into
    # newLikeFlat(outputs) and copies out (a transient stacked tensor); get_backend names the
    # backend init_process_group was given
    script = tmp_script(
        "import os, torch, torch.distributed as dist\n"
        "os.environ.update(MASTER_ADDR='localhost', MASTER_PORT='29533')\n"
        f"dist.init_process_group({backend}, rank=0, world_size=1)\n"
        "w = dist.get_world_size()\n"
        "print('BACKEND', dist.get_backend())\n"
        "dist.barrier()\n"
        "torch.cuda.reset_peak_memory_stats()\n"
        "x = torch.empty(1024, 1024, device='cuda')\n"
        "outs = [torch.empty_like(x) for _ in range(w)]\n"
        "dist.all_gather(outs, x)\n"
        "torch.cuda.reset_peak_memory_stats()\n"
        "dist.destroy_process_group()\n"
    )
    extra = ("--gpu", "h200") + (("--nproc", str(nproc)) if nproc else ())
    status, lines, report, err = run_script(script, extra=extra)
    assert status == 0, err[-3000:]
    assert f"BACKEND {named}" in lines
    phases = report["phases"]
    kept = 512 if barrier else 0
    assert [phases[0][k] for k in ("peak_allocated", "allocated", "reserved")] == (
        [1024, 512, 2 << 20] if barrier else [0, 0, 0]
    )
    world = nproc or 1
    # the input, the world's outputs and their stacked copy
    assert phases[1]["peak_allocated"] == (1 + 2 * world) * (4 << 20) + kept


def test_object_collectives_pickle_into_cuda_byte_tensors_under_nccl(tmp_script):
    # distributed_c10d._get_object_coll_device: the GPU's NCCL group has CUDA alone, so
    # all_gather_object pickles into CUDA byte tensors (blind248/io02: DCP's plans, 77,824 bytes of
    # its save's peak); the fake group lists the CPU too and the twin had put them on the host
    script = tmp_script(
        "import os, pickle, torch, torch.distributed as dist\n"
        "os.environ.update(MASTER_ADDR='localhost', MASTER_PORT='29534')\n"
        "dist.init_process_group('nccl', rank=0, world_size=1)\n"
        "obj = {'a': list(range(10000))}\n"
        "print('PICKLED', len(pickle.dumps(obj)))\n"
        "out = [None]\n"
        "dist.all_gather_object(out, obj)\n"
        "print('SAME', out[0] == obj)\n"
        "torch.cuda.reset_peak_memory_stats()\n"
        "dist.destroy_process_group()\n"
    )
    status, lines, report, err = run_script(script, extra=("--gpu", "h200"))
    assert status == 0, err[-3000:]
    assert "SAME True" in lines
    pickled = int(next(line.split()[1] for line in lines if line.startswith("PICKLED")))
    assert report["phases"][0]["peak_allocated"] >= pickled


@pytest.mark.parametrize("order", ["compile_then_ddp", "ddp_then_compile"])
def test_compiled_ddp_splits_its_graph_at_the_buckets_under_the_twin(tmp_script, order):
    # nanoGPT's `torch.compile(model)` then `DDP(model)`, and `torch.compile(DDP(model))`: dynamo's
    # DDPOptimizer compiles one graph per bucket. Before, the first aborted in AOTAutograd (the
    # capture's dispatch mode left on: "Attempting to use FunctionalTensor on its own", then the
    # process on the CUDA stream of a fake output), the second recursed without end in the
    # compiled stand-in of `torch.accelerator.current_stream`
    script = tmp_script(
        "import os, torch, torch.nn as nn, torch.distributed as dist\n"
        "from torch._dynamo.utils import counters\n"
        "from torch.nn.parallel import DistributedDataParallel as DDP\n"
        "os.environ.update(MASTER_ADDR='localhost', MASTER_PORT='29541')\n"
        "dist.init_process_group('nccl', rank=0, world_size=1)\n"
        "class Net(nn.Module):  # (the program's own forward: dynamo skips torch.nn's frames)\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.layers = nn.ModuleList(nn.Linear(512, 512) for _ in range(4))\n"
        "    def forward(self, x):\n"
        "        for layer in self.layers:\n"
        "            x = layer(x).relu()\n"
        "        return x\n"
        "m = Net().cuda()\n"
        f"if {order!r} == 'compile_then_ddp':\n"
        "    m = DDP(torch.compile(m), device_ids=[0], bucket_cap_mb=1)\n"
        "else:\n"
        "    m = torch.compile(DDP(m, device_ids=[0], bucket_cap_mb=1, gradient_as_bucket_view=True))\n"
        "for _ in range(2):\n"
        "    m(torch.randn(64, 512, device='cuda')).sum().backward()\n"
        "print('GRAPHS', counters['aot_autograd']['total'])\n"
        "dist.destroy_process_group()\n"
    )
    status, lines, report, err = run_script(script, extra=("--gpu", "h200"))
    assert status == 0, err[-3000:]
    assert report["unmeasured"] == [], report["unmeasured"]
    # one graph per bucket: each 1 MiB Linear (and its bias) in a bucket of its own
    assert [line for line in lines if line.startswith("GRAPHS")] == ["GRAPHS 4"]


SHARDED_SDPA = """
import os, torch, torch.nn.functional as F
os.environ.setdefault("RANK", "0"); os.environ.setdefault("WORLD_SIZE", "1")
os.environ.setdefault("MASTER_ADDR", "127.0.0.1"); os.environ.setdefault("MASTER_PORT", "29547")
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import Shard, distribute_tensor
mesh = init_device_mesh("cuda", (int(os.environ["WORLD_SIZE"]),))
q, k, v = (distribute_tensor(torch.randn(8, 16, 256, 16, device="cuda", requires_grad=True), mesh, [Shard(1)])
           for _ in range(3))
out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
out.sum().backward()
print("ran", out.placements, out.to_local().shape[1], q.grad.placements)
"""


def test_sdpa_over_head_sharded_dtensors_takes_the_gpu_s_fused_kernel(tmp_script):
    # pytorch/examples' distributed/tensor_parallelism/fsdp_tp_example.py: attention over DTensors
    # sharded on the heads. On the GPU the composite asks the CUDA backend choice (a DTensor is a
    # CUDA tensor there): memory-efficient for fp32, which DTensor shards on the heads. The twin's
    # DTensors sat on the meta device, the choice said math, and math's flattening reshape of the
    # sharded heads raised ("Attempted to flatten multiple dimensions, with dimension 1 being sharded")
    status, lines, _report, err = run_script(tmp_script(SHARDED_SDPA), extra=("--nproc", "2"))
    assert status == 0, err[-3000:]
    assert lines[-1] == "ran (Shard(dim=1),) 8 (Shard(dim=1),)"


DCP_SHARDED = """
import os, tempfile, torch
import torch.distributed.checkpoint as dcp
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor.parallel import ColwiseParallel, parallelize_module
mesh = init_device_mesh("cuda", (int(os.environ["WORLD_SIZE"]),))
lin = parallelize_module(torch.nn.Linear(256, 512).cuda(), mesh, ColwiseParallel())
with tempfile.TemporaryDirectory() as d:
    dcp.save({"model": lin.state_dict()}, checkpoint_id=d)
    print("ran", sorted(os.listdir(d))[:2])
"""


def test_dcp_save_of_sharded_dtensors_runs_on_one_rank_of_several(tmp_script):
    # PyTorch Lightning's ModelParallelStrategy saves its checkpoint with torch.distributed.checkpoint:
    # the coordinator checks that the chunks of every rank's plan cover each tensor
    # (`_validate_global_plan`, torch/distributed/checkpoint/default_planner.py). Under `--nproc N`
    # the other ranks' plans are stand-ins (this rank's), which cover 1/N of a sharded tensor: the
    # check raised "Failed to validate global plan"
    status, lines, _report, err = run_script(tmp_script(DCP_SHARDED), extra=("--nproc", "2"))
    assert status == 0, err[-3000:]
    assert lines[-1] == "ran ['.metadata', '__0_0.distcp']"


def test_ddp_python_comm_hook_builds_tensors_from_data_on_the_simulated_gpu(tmp_script):
    # blind272/jm03: PowerSGD's hook makes `torch.tensor([], device=device)` for a bucket whose
    # gradients are all compressed (powerSGD_hook.py); the reducer runs the hook inside the backward,
    # which the program entered through the twin's function mode, popped there: the tensor went to
    # the host's CUDA ("Found no NVIDIA driver")
    script = tmp_script(
        "import os, torch, torch.nn as nn, torch.distributed as dist\n"
        "from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as ps\n"
        "from torch.nn.parallel import DistributedDataParallel as DDP\n"
        "os.environ.update(MASTER_ADDR='localhost', MASTER_PORT='29537')\n"
        "dist.init_process_group('nccl', rank=0, world_size=1)\n"
        "m = DDP(nn.Linear(1024, 1024, bias=False).cuda(), device_ids=[0])\n"
        "st = ps.PowerSGDState(None, matrix_approximation_rank=4, start_powerSGD_iter=2)\n"
        "m.register_comm_hook(st, ps.powerSGD_hook)\n"
        "def hook(state, bucket):\n"
        "    t = torch.tensor([1.0, 2.0], device=bucket.buffer().device)\n"
        "    print('HOOK', t.device, torch.ones(3).cuda().device)\n"
        "    return ps.powerSGD_hook(state, bucket)\n"
        "m2 = DDP(nn.Linear(64, 64).cuda(), device_ids=[0])\n"
        "m2.register_comm_hook(ps.PowerSGDState(None, start_powerSGD_iter=2), hook)\n"
        "for _ in range(3):\n"
        "    m(torch.randn(64, 1024, device='cuda')).sum().backward()\n"
        "m2(torch.randn(8, 64, device='cuda')).sum().backward()\n"
        "print('P', [tuple(p.shape) for p in st.p_memory_dict.values()], torch.cuda.memory_allocated())\n"
        "dist.destroy_process_group()\n"
    )
    status, lines, _report, err = run_script(script, extra=("--gpu", "h200"))
    assert status == 0, err[-3000:]
    assert [line for line in lines if line.startswith("HOOK")] == ["HOOK cuda:0 cuda:0"]
    assert [line.split()[1] for line in lines if line.startswith("P ")] == ["[(4096,)]"]


def test_nccl_future_callbacks_run_on_pool_streams_each_with_its_cublas_workspace(tmp_script):
    # blind272/jm03 (H100, session 62): ProcessGroupNCCL's future is a CUDA `ivalue::Future`, whose
    # callbacks run on a stream taken from the device's pool (`invokeCallback`, ivalue_inl.h): round
    # robin over its 32 streams, the communicator's own stream the first taken. PowerSGD's `bmm`s in
    # `compute_qs` and `decompress` made a cuBLAS workspace on each of the 32: 1 GiB the GPU kept
    # and the twin, which ran every callback on the current stream, did not
    script = tmp_script(
        "import os, torch, torch.distributed as dist\n"
        "os.environ.update(MASTER_ADDR='localhost', MASTER_PORT='29538')\n"
        "dist.init_process_group('nccl', rank=0, world_size=1, device_id=torch.device('cuda', 0))\n"
        "a = torch.randn(256, 256, device='cuda')\n"
        "a @ a\n"
        "base = torch.cuda.memory_allocated()\n"
        "grown = []\n"
        "for _ in range(40):\n"
        "    dist.all_reduce(a, async_op=True).get_future().then(lambda f: f.value()[0] @ a).wait()\n"
        "    grown.append(torch.cuda.memory_allocated() - base)\n"
        "print('W', grown[0] > 0, [g // max(grown[0], 1) for g in grown[29:33]], grown[-1] == grown[32])\n"
        "dist.destroy_process_group()\n"
    )
    status, lines, _report, err = run_script(script, extra=("--gpu", "h100"))
    assert status == 0, err[-3000:]
    # the NCCL stream took index 0: 31 callbacks fill indices 1-31, the 32nd gets the NCCL stream
    # (no workspace yet), the 33rd index 1 again
    assert [line for line in lines if line.startswith("W ")] == ["W True [30, 31, 32, 32] True"]
