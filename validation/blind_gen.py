"""How the generated blind sets were chosen: N is a set's place in the order the sets were
recorded (`SETS`; fixtures/unseen/README.md): 15 is validation/unseen/blind_forward0_mappings.json,
16 blind_cudnn_libraries, 17 blind_new_configs, 18 blind_new_configs_2 (fixtures/unseen/SET/README.md).

    python3 validation/blind_gen.py N gen CANDIDATES.json
        workloads from the configs of the sets before N (seed N)
    python3 validation/blind_gen.py N new OUT.json [COUNT]
        COUNT (default 24) workloads on configs no set had before: for each, a family at random
        (each family twice first), one of its configs before set N as a template, and new sizes
        (hidden size, heads, key-value heads, head dim, layers, intermediate size, vocabulary;
        image and patch size for ViT) drawn at random (seed N); the workload drawn as in `gen`;
        from N = 18 on, only workloads PyTorch builds (a Phi-3 vocabulary that holds its default
        pad_token_id, a BERT sequence within its 512 positions). `gen` has no such guards: for
        sets after 16 it can draw configs PyTorch refuses (fixtures' NAME.refused.txt)
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

# validation/unseen/SET.json, in the order the sets were recorded (N = 1, 2, ...)
SETS = ["shapes_and_settings", "presets_odd_lengths", "presets_full_size",
        "largest_batch_bisections", "presets_full_size_rest", "head_dim_256", "config_code_paths",
        "settings_combined", "extreme_fields_and_shapes", "hub_config_files",
        "small_training_placement", "blind_driver_rule6", "presets_least_used_options",
        "driver_rule7", "blind_forward0_mappings", "blind_cudnn_libraries", "blind_new_configs",
        "blind_new_configs_2"]


def case_lists():
    """Every case list, in the order the sets drew from them: by the file names they had when
    the sets were drawn (an unseen set's was `unseenN_cases.json`, the first set's
    `unseen_cases.json`), with each unseen set's number (None for the others)."""
    lists = [(os.path.basename(f), f, None) for f in glob.glob(f"{HERE}/*cases.json")]
    for n, name in enumerate(SETS, 1):
        was = f"unseen{'' if n == 1 else n}_cases.json"
        lists.append((was, f"{HERE}/unseen/{name}.json", n))
    return [(f, n) for _, f, n in sorted(lists)]


def configs_before(set_no):
    """{md5 key: (case, config)} of the sets before set_no (small enough to run quickly), and
    the names used."""
    seen_cfg, names = {}, set()
    for f, n in case_lists():
        if n is not None and n != 1 and n >= set_no:
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
    return seen_cfg, names


def workload(set_no, k, c, cfg):
    """A workload on config cfg (key k, from case c), drawn at random."""
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
    n["name"] = (f"{fam}_{k}_{mode}_{weights}{'_ac' if autocast else ''}_{opt}"
                 f"{'m' if mom else ''}{'_ckpt' if ck else ''}_b{n['batch']}"
                 + (f"_s{n['seq']}" if "seq" in n else ""))
    if "alloc_conf" in c:
        n["alloc_conf"] = ""
    return n


def gen(set_no, out_path):
    random.seed(set_no)
    seen_cfg, _ = configs_before(set_no)
    names = set()  # (the set's own: its names once had its prefix, no other set's)
    out, keys = [], sorted(seen_cfg)
    for _ in range(500):
        k = random.choice(keys)
        c, cfg = seen_cfg[k]
        n = workload(set_no, k, c, cfg)
        if n["name"] in names:
            continue
        names.add(n["name"])
        out.append(n)
    json.dump(out, open(out_path, "w"))
    print(len(out), "workloads from", len(keys), "configs")


def new_sizes(cfg):
    """cfg with new sizes drawn at random, its other fields (flags, windows, ties) kept."""
    cfg = dict(cfg)
    get = lambda *ks: next((k for k in ks if k in cfg), None)
    fam = cfg["model_type"]
    head_dim = random.choice([32, 64, 64, 96, 128])
    heads = random.choice([2, 4, 6, 8, 12, 16])
    hidden = head_dim * heads
    if fam in ("gemma2", "qwen3"):
        # a head dim of its own, but hidden still a multiple of the heads (transformers'
        # `validate_architecture`)
        hidden = heads * random.choice([32, 48, 64, 96, 128])
    cfg[get("hidden_size", "n_embd")] = hidden
    cfg[get("num_attention_heads", "n_head")] = heads
    cfg[get("num_hidden_layers", "n_layer")] = random.randint(2, 8)
    if "num_key_value_heads" in cfg:
        cfg["num_key_value_heads"] = random.choice([d for d in (1, 2, 4, heads) if heads % d == 0])
    if "head_dim" in cfg:
        cfg["head_dim"] = head_dim
    if "query_pre_attn_scalar" in cfg:
        cfg["query_pre_attn_scalar"] = head_dim
    inter = get("intermediate_size", "n_inner")
    if inter:
        cfg[inter] = hidden * random.choice([2, 3, 4]) + random.choice([0, 64, 128])
    if fam == "vit":
        cfg["patch_size"] = random.choice([8, 14, 16, 32])
        cfg["image_size"] = cfg["patch_size"] * random.choice([7, 8, 12, 14])
    elif "vocab_size" in cfg:
        cfg["vocab_size"] = random.choice([8192, 16000, 30522, 32000, 32768, 50257, 65536])
    return cfg


def new(set_no, out_path, count=24):
    random.seed(set_no)
    seen_cfg, names = configs_before(set_no)
    by_fam = {}
    for k in sorted(seen_cfg):
        by_fam.setdefault(seen_cfg[k][1].get("model_type"), []).append(k)
    fams = sorted(by_fam) * 2
    fams += [random.choice(sorted(by_fam)) for _ in range(count - len(fams))]
    out = []
    for fam in fams[:count]:
        c, cfg = seen_cfg[random.choice(by_fam[fam])]
        cfg = new_sizes(cfg)
        k = hashlib.md5(json.dumps(cfg, sort_keys=True).encode()).hexdigest()[:8]
        if set_no >= 18 and fam == "phi3" and "pad_token_id" not in cfg and cfg["vocab_size"] <= 32000:
            # from set 18 on, only configs PyTorch builds: Phi-3's default pad_token_id (32000)
            # must index its vocabulary (set 17 found it did not); Phi-3's own vocabulary
            cfg["vocab_size"] = 32064
            k = hashlib.md5(json.dumps(cfg, sort_keys=True).encode()).hexdigest()[:8]
        n = workload(set_no, k, c, cfg)
        if set_no >= 18 and fam == "bert" and n["seq"] > cfg.get("max_position_embeddings", 512):
            # BERT's class default: 512 positions
            n["seq"] = cfg.get("max_position_embeddings", 512)
            n["name"] = re.sub(r"_s\d+$", f"_s{n['seq']}", n["name"])
        if fam == "roberta" and n["seq"] > cfg.get("max_position_embeddings", 514) - 2:
            # RoBERTa's positions start after its padding index: two fewer to embed
            n["seq"] = cfg.get("max_position_embeddings", 514) - 2
            n["name"] = re.sub(r"_s\d+$", f"_s{n['seq']}", n["name"])
        names.add(n["name"])
        out.append(n)
    json.dump(out, open(out_path, "w"), indent=1)
    print(len(out), "workloads on new configs")


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
    elif len(sys.argv) > 3 and sys.argv[2] == "new":
        new(int(sys.argv[1]), sys.argv[3], *(int(x) for x in sys.argv[4:5]))
    elif len(sys.argv) > 2 and sys.argv[2] == "pick":
        pick(int(sys.argv[1]), sys.argv[3], sys.argv[4], sys.argv[5:])
    else:
        sys.exit(__doc__)
