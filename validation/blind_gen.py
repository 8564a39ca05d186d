"""How the generated blind sets were chosen: validation/unseenN_cases.json for N = 15, 16
(fixtures/estimate_unseenN/README.md).

    python3 validation/blind_gen.py N gen CANDIDATES.json
        workloads from the configs of the sets before N (seed N), named uN_...
    python3 validation/blind_gen.py N pick CANDIDATES.json OUT.json A.txt B.txt ...
        the ones on which the twin's figure files A, B, ... (one line per case: NAME then
        PHASE:alloc:peak_alloc:reserved:peak_reserved ..., as in answers.txt without the
        version column) do not all agree, two per family at random (seed N23: 1523, 1623)

The figure files: for 15, the twin at fb028b4 and branch wip-fwd0 with VS_EXP=0, 25 and 31
(497 candidates); for 16, the twin at 25b0d20 (main) and branch wip-libs with VS_EXP=1, cuDNN's
libraries mapped at the first attention (499 candidates).
"""
import glob, hashlib, json, os, random, re, sys

HERE = os.path.dirname(os.path.abspath(__file__))


def gen(set_no, out_path):
    random.seed(set_no)
    seen_cfg, names = {}, set()
    for f in sorted(glob.glob(f"{HERE}/*cases.json")):
        m = re.fullmatch(r"unseen(\d+)_cases\.json", os.path.basename(f))
        if m and int(m.group(1)) >= set_no:
            continue  # (written after)
        try:
            cs = json.load(open(f))
        except Exception:
            continue
        if not isinstance(cs, list):
            continue
        for c in cs:
            if not isinstance(c, dict) or not isinstance(c.get("config"), dict):
                continue
            names.add(c["name"])
            cfg = c["config"]
            h = cfg.get("hidden_size", cfg.get("n_embd", 0)) or 0
            layers = cfg.get("num_hidden_layers", cfg.get("n_layer", 0)) or 0
            if h * h * layers > 2048 * 2048 * 24:
                continue  # small enough to run quickly
            key = hashlib.md5(json.dumps(cfg, sort_keys=True).encode()).hexdigest()[:8]
            seen_cfg[key] = (c, cfg)
    out, keys = [], sorted(seen_cfg)
    for _ in range(500):
        k = random.choice(keys)
        c, cfg = seen_cfg[k]
        task = c["task"]
        mode = random.choice(["train", "train", "train", "infer"])
        weights = random.choice(["bf16", "bf16", "fp32", "fp16"])
        autocast = random.choice([None, "bf16"]) if weights == "fp32" else None
        opt = random.choice(["adamw", "sgd", "adam"])
        mom = random.choice([0.0, 0.9]) if opt == "sgd" else 0.0
        ck = random.random() < 0.25 and mode == "train"
        batch = random.choice([1, 2, 3, 4, 6, 8])
        n = dict(name=None, config=cfg, task=task, mode=mode, batch=batch, weights=weights,
                 autocast=autocast, optimizer=opt, momentum=mom, lr=1e-4, checkpointing=ck,
                 steps=3 if mode == "train" else 2)
        if task == "image":
            n["batch"] = random.choice([8, 16, 24, 32])
        else:
            maxp = cfg.get("max_position_embeddings", cfg.get("n_positions", 2048)) or 2048
            n["seq"] = min(maxp, random.choice([128, 200, 256, 384, 512, 640, 768, 1024]))
        fam = cfg.get("model_type")
        n["name"] = (f"u{set_no}_{fam}_{k}_{mode}_{weights}{'_ac' if autocast else ''}_{opt}"
                     f"{'m' if mom else ''}{'_ckpt' if ck else ''}_b{n['batch']}"
                     + (f"_s{n['seq']}" if "seq" in n else ""))
        if n["name"] in names:
            continue
        names.add(n["name"])
        if "alloc_conf" in c:
            n["alloc_conf"] = ""
        out.append(n)
    json.dump(out, open(out_path, "w"))
    print(len(out), "workloads from", len(keys), "configs")


def pick(set_no, cand_path, out_path, figure_paths):
    def read(f):
        return {l.split()[0]: l.split()[1:] for l in open(f) if l.strip()}
    figs = [read(f) for f in figure_paths]
    cand = {c["name"]: c for c in json.load(open(cand_path))}
    diff = [n for n in figs[0] if figs[0][n][0] != "ERR" and len({tuple(f[n]) for f in figs}) > 1]
    random.seed(int(f"{set_no}23"))
    byfam = {}
    for n in diff:
        byfam.setdefault(cand[n]["config"]["model_type"], []).append(n)
    chosen = []
    for _, v in sorted(byfam.items()):
        random.shuffle(v)
        chosen += v[:2]
    json.dump([cand[n] for n in chosen], open(out_path, "w"), indent=1)
    print(len(diff), "of", len(figs[0]), "disagree;", len(chosen), "chosen")


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[2] == "gen":
        gen(int(sys.argv[1]), sys.argv[3])
    elif len(sys.argv) > 2 and sys.argv[2] == "pick":
        pick(int(sys.argv[1]), sys.argv[3], sys.argv[4], sys.argv[5:])
    else:
        sys.exit(__doc__)
