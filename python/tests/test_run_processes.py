"""`vramscope run` of a program whose own processes, started under the spawn start method, do
CUDA work (`_processes.py`): pytorch/examples' mnist_hogwild layout."""

from __future__ import annotations

from conftest import run_script

HOGWILD = """
import os, torch, torch.nn as nn, torch.multiprocessing as mp


def train(rank, model):
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(2):
        opt.zero_grad()
        model(torch.randn(64, 256, device="cuda")).sum().backward()
        opt.step()
    w = next(model.parameters())
    os.write(1, f"child {rank} {w.device} {w.requires_grad}\\n".encode())  # one write: lines never interleave


if __name__ == "__main__":
    mp.set_start_method("spawn", force=True)
    model = nn.Sequential(nn.Linear(256, 1024), nn.ReLU(), nn.Linear(1024, 10)).cuda()
    model.share_memory()
    before = torch.cuda.memory_allocated()
    procs = [mp.Process(target=train, args=(r, model)) for r in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
    print("parent", [p.exitcode for p in procs], torch.cuda.memory_allocated() - before)
"""


def test_spawned_processes_of_the_program_run_their_cuda_work_under_the_twin(tmp_script):
    # each child is a CUDA process of its own on the GPU, the model's parameters mapped from the
    # parent by CUDA IPC; started outside the twin, it got meta tensors and raised "Found no
    # NVIDIA driver" at its first CUDA call (exit code 1). The parent allocates nothing for them
    status, lines, report, err = run_script(tmp_script(HOGWILD))
    assert status == 0, err[-3000:]
    assert sorted(line for line in lines if line.startswith("child")) == [
        "child 0 cuda:0 True",
        "child 1 cuda:0 True",
    ], err[-3000:]
    assert lines[-1] == "parent [0, 0] 0"
    # the parent's figures are its own: the model's four parameters (each block a multiple of 512
    # bytes), nothing of the children's
    assert report["peak_allocated"] == sum(-(-n * 4 // 512) * 512 for n in (256 * 1024, 1024, 1024 * 10, 10))
