"""Compare the wrappers Inductor generated for the same scripts in two cache folders (the twin's
`TORCHINDUCTOR_CACHE_DIR`, the GPU's from fixtures/run/compile_wrappers_h200.tar.xz), graph by graph
(their `# AOT ID` line): the lines of each `call()` (and of the `partition_N` functions it calls
under CUDA graph partitions) that allocate, reuse, delete and call library kernels, with Triton
kernels' names masked (the twin compiles none).

    python validation/run/compile/wrappers_diff.py TWIN_DIR GPU_DIR
"""

import os
import re
import sys

NODE = re.compile(r"\b(?!primals_|tangents_)([a-z][a-z_]*?)_\d+\b")
SKIP = re.compile(r"^\s*#|assert_size_stride|assert_alignment|get_raw_stream")


def wrappers(root):
    out = {}
    for folder, _, files in os.walk(root):
        for name in files:
            if not name.endswith(".py"):
                continue
            text = open(os.path.join(folder, name)).read()
            if "def call(self, args)" not in text:
                continue
            graph = text.splitlines()[0]
            # with CUDA graph partitions (mode="reduce-overhead") `call()` runs `partition_N(args)`,
            # which hold the buffers: their bodies come first
            bodies = [
                part.split("\n    return", 1)[0]
                for part in re.split(r"\ndef partition_\d+\(args\):", text)[1:]
            ]
            bodies.append(text.split("def call(self, args)", 1)[1].split("\n        return", 1)[0])
            lines = [
                NODE.sub(
                    r"\1_N",
                    re.sub(r"triton_\w+_(xnumel|r0_numel)", "N", re.sub(r"triton_\w+\.run", "K.run", x)),
                )
                for body in bodies
                for x in body.splitlines()
                if not SKIP.search(x)
            ]
            out[graph] = lines
    return out


def main():
    twin, gpu = wrappers(sys.argv[1]), wrappers(sys.argv[2])
    for graph in sorted(set(twin) | set(gpu)):
        a, b = twin.get(graph), gpu.get(graph)
        if a is None or b is None:
            print(f"{graph}: only in {'the GPU' if a is None else 'the twin'}'s")
            continue
        same = sum(x == y for x, y in zip(a, b, strict=False))
        print(f"{graph}: {len(a)} lines (twin) {len(b)} (GPU), {len(a) - same + abs(len(a) - len(b))} differ")


if __name__ == "__main__":
    main()
