"""CUB's temporary storage for a 1-D cumsum on the GPU (vramscope's `cumsum` rule).

    python3 validation/cub_scan.py OUT.jsonl

`scan_dim` (aten/src/ATen/native/cuda/ScanUtils.cuh) scans a tensor whose numel equals the
size of the scanned dim with `at::cuda::cub::inclusive_scan`, which asks CUB's
`DeviceScan::InclusiveScan` for its temporary storage and takes that many bytes from the caching
allocator for the call (`CUB_WRAPPER`, aten/src/ATen/cuda/cub.cuh). How many depends on CUB's
tile size for the dtype and GPU, so it is measured: one line per (dtype, n) with the sizes of
every allocation `torch.cumsum(x, 0)` made, from the allocator trace (the output is the one of
n * itemsize bytes; the other is CUB's). The models scan int64 (cumsum promotes bool and
integer inputs to int64 before the scan).
"""
import json
import sys

import torch

SIZES = sorted(set(list(range(1, 65)) + [
    96, 127, 128, 129, 255, 256, 257, 300, 333, 383, 384, 385, 511, 512, 513, 767, 768, 769, 777,
    1000, 1023, 1024, 1025, 1279, 1280, 1536, 1537, 2047, 2048, 2049, 2304, 2305, 3071, 3072,
    3073, 4095, 4096, 4097, 6144, 8191, 8192, 8193, 12288, 16383, 16384, 16385, 32768, 32769,
    65536, 100000, 131072, 131073, 262144, 524288, 1000000, 1048576, 4194304, 16777216]))


def main():
    out = open(sys.argv[1], "w")
    torch.cuda.init()
    for dtype in (torch.int64, torch.int32, torch.float32):
        for n in SIZES:
            x = torch.zeros(n, dtype=dtype, device="cuda")
            torch.cuda.synchronize()
            torch.cuda.memory._record_memory_history(max_entries=100, stacks="python")
            y = torch.cumsum(x, 0)
            torch.cuda.synchronize()
            snap = torch.cuda.memory._snapshot()
            torch.cuda.memory._record_memory_history(enabled=None)
            allocs = [e["size"] for e in snap["device_traces"][0] if e["action"] == "alloc"]
            out.write(json.dumps(dict(dtype=str(dtype).replace("torch.", ""), n=n, out_dtype=str(y.dtype).replace("torch.", ""),
                                      allocs=allocs)) + "\n")
            del x, y
    out.write(json.dumps(dict(env=dict(torch=torch.__version__, cuda=torch.version.cuda,
                                       gpu=torch.cuda.get_device_name()))) + "\n")


if __name__ == "__main__":
    main()
