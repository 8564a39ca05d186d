"""The twin's answers for validation/multi/multi_cases.json, one JSON line per rank per phase, in
the format multi_cases.py records (written before the GPU runs them: a blind set).

    python3 validation/multi/answers.py VRAMSCOPE_BINARY N OUT.jsonl [--gpu h200] [--cases CASES.json]

Runs `vramscope estimate --config ... --fsdp N ... --json` for every case (its `ranks` give every
rank's phases); a case the twin does not model gets one line {case, world, unsupported: message}.
"""
import json
import os
import subprocess
import sys
import tempfile


def case_args(binary, c, n, gpu, config_path):
    """`vramscope estimate` arguments for case `c` of a multi_cases*.json over `n` GPUs."""
    mode = c.get("mode", "train")
    args = [binary, "estimate", "--config", config_path, "--mode", mode, "--batch", str(c["batch"]),
            "--weights", c.get("weights", "fp32"), "--gpu", gpu]
    if mode == "generate":
        args += ["--new-tokens", str(c["new_tokens"])]
    else:
        args += ["--steps", str(c.get("steps", 3 if mode == "train" else 2))]
    if mode == "train":
        args += ["--optimizer", c.get("optimizer", "adamw"),
                 "--optimizer-impl", c.get("optimizer_impl", "foreach"),
                 "--momentum", str(c.get("momentum", 0.0))]
    if c.get("lora"):
        lc = c["lora"]
        args += ["--lora", str(lc["r"]), "--lora-alpha", str(lc.get("alpha", 8)),
                 "--lora-dropout", str(lc.get("dropout", 0.0))]
        if lc.get("targets"):
            args += ["--lora-targets", ",".join(lc["targets"])]
    if c.get("seq") is not None:
        args += ["--seq", str(c["seq"])]
    if c.get("task"):
        args += ["--task", c["task"]]
    if c.get("checkpointing"):
        args.append("--checkpointing")
    if c.get("accumulation", 1) > 1:
        args += ["--accumulation", str(c["accumulation"])]
    if c.get("autocast"):
        args += ["--autocast", c["autocast"]]
    if mode == "infer":
        args += ["--grad", c.get("grad", "no_grad").replace("_", "-")]
    if c["parallel"] == "fsdp":
        args += ["--fsdp", str(n)]
        if c.get("param_dtype"):
            args += ["--fsdp-param-dtype", c["param_dtype"]]
        if not c.get("reshard", True):
            args.append("--fsdp-no-reshard")
        if c.get("cpu_offload"):
            args.append("--fsdp-cpu-offload")
    else:
        args += ["--ddp", str(n)]
        # multi_cases.py passes bucket_cap_mb=case.get("bucket_mb", 25): null is DDP's default
        mb = c.get("bucket_mb", 25)
        if mb is not None:
            args += ["--ddp-bucket-mb", str(mb)]
        if c.get("grad_as_bucket_view"):
            args.append("--ddp-grad-as-bucket-view")
        if c.get("find_unused"):
            args.append("--ddp-find-unused-parameters")
    return args


def main():
    binary, n, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    gpu = sys.argv[sys.argv.index("--gpu") + 1] if "--gpu" in sys.argv else "h200"
    here = os.path.dirname(os.path.abspath(__file__))
    path = (sys.argv[sys.argv.index("--cases") + 1] if "--cases" in sys.argv
            else os.path.join(here, "multi_cases.json"))
    cases = json.load(open(path))
    lines = []
    for c in cases:
        with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
            json.dump(c["config"], f)
        args = [*case_args(binary, c, n, gpu, f.name), "--json"]
        p = subprocess.run(args, capture_output=True, text=True)
        os.unlink(f.name)
        if p.returncode not in (0, 1):
            msg = (p.stderr.strip().splitlines() or ["?"])[-1]
            lines.append(dict(case=c["name"], world=n, unsupported=msg))
            continue
        d = json.loads(p.stdout)
        for group in d["ranks"]:
            for r in group["ranks"]:
                for ph in group["phases"]:
                    lines.append(dict(case=c["name"], rank=r, world=n, phase=ph["name"],
                                      allocated_bytes=ph["allocated_bytes"],
                                      peak_allocated_bytes=ph["peak_allocated_bytes"],
                                      reserved_bytes=ph["reserved_bytes"],
                                      peak_reserved_bytes=ph["peak_reserved_bytes"],
                                      requested_bytes=ph["requested_bytes"]))
    with open(out, "w") as f:
        for line in lines:
            f.write(json.dumps(line) + "\n")
    print(f"{len(lines)} lines, {sum('unsupported' in x for x in lines)} cases unsupported", file=sys.stderr)


if __name__ == "__main__":
    main()
