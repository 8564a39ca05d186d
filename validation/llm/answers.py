"""The twin's answers for a case list of `llm_cases.py`, in its output's form (one JSON line per
phase), from the `vramscope` binary:

    python3 validation/llm/answers.py CASES.json OUT.jsonl [--bin target/release/vramscope] [--gpu h200]

Each case runs `vramscope estimate --config CONFIG --json ...` with the case's workload.
"""
import argparse
import json
import os
import subprocess
import tempfile


def args_of(case):
    a = ["--mode", case["mode"], "--batch", str(case["batch"]), "--seq", str(case["seq"]),
         "--task", case["task"], "--weights", case.get("weights", "fp32")]
    if case.get("autocast"):
        a += ["--autocast", case["autocast"]]
    if case["mode"] == "train":
        a += ["--optimizer", case.get("optimizer", "adamw"),
              "--optimizer-impl", case.get("optimizer_impl", "foreach"),
              "--momentum", str(case.get("momentum", 0.0)), "--steps", str(case.get("steps", 3))]
        if case.get("checkpointing"):
            a += ["--checkpointing", "--checkpoint-every", str(case.get("checkpointing_every", 1))]
    if case["mode"] == "infer":
        a += ["--steps", str(case.get("steps", 2))]
    if case["mode"] == "generate":
        a += ["--new-tokens", str(case["new_tokens"]), "--cache", case.get("cache", "dynamic")]
    if case.get("lora"):
        lc = case["lora"]
        a += ["--lora", str(lc["r"]), "--lora-alpha", str(lc.get("alpha", 8)),
              "--lora-dropout", str(lc.get("dropout", 0.0))]
        if lc.get("targets"):
            a += ["--lora-targets", ",".join(lc["targets"])]
    if case.get("alloc_conf"):
        a += ["--alloc-conf", case["alloc_conf"]]
    return a


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("cases"); ap.add_argument("out")
    ap.add_argument("--bin", default="target/release/vramscope"); ap.add_argument("--gpu", default="h200")
    a = ap.parse_args()
    with open(a.cases) as f:
        cases = json.load(f)
    with open(a.out, "w") as out, tempfile.TemporaryDirectory() as tmp:
        for case in cases:
            cfg = os.path.join(tmp, "config.json")
            with open(cfg, "w") as f:
                json.dump(case["config"], f)
            cmd = [a.bin, "estimate", "--config", cfg, "--gpu", a.gpu, "--json"] + args_of(case)
            r = subprocess.run(cmd, capture_output=True, text=True)
            if r.returncode != 0:
                out.write(json.dumps(dict(case=case["name"], error=r.stderr.strip())) + "\n")
                continue
            est = json.loads(r.stdout)
            for p in est["phases"]:
                out.write(json.dumps(dict(case=case["name"], phase=p["name"],
                                          **{k: p[k] for k in ("allocated_bytes", "peak_allocated_bytes",
                                                               "reserved_bytes", "peak_reserved_bytes",
                                                               "requested_bytes")})) + "\n")
            if case.get("per_step"):
                for st in est.get("decode_steps") or []:
                    out.write(json.dumps(dict(case=case["name"], phase="decode", **st)) + "\n")
            if est.get("oom"):
                out.write(json.dumps(dict(case=case["name"], error="oom", oom=est["oom"])) + "\n")


if __name__ == "__main__":
    main()
