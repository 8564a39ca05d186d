"""TorchBench's models (github:pytorch/benchmark), unmodified, under the twin and on a GPU: the
TorchBench section of validation/run/wild/README.md.

    python validation/run/wild/torchbench.py data CHECKOUT                   # fake weights, hub configs
    python validation/run/wild/torchbench.py twin CHECKOUT OUTDIR [NAME ...]  # vramscope run --gpu h200
    python validation/run/wild/torchbench.py gpu  CHECKOUT OUTDIR [NAME ...]  # record.py, on the GPU

CHECKOUT is pytorch/benchmark at COMMIT. twin and gpu write the fake weights first (as `data`;
NO_FAKE_DATA=1 skips it; TORCH_HOME=CHECKOUT/.torch_home), then run torchbench_driver.py for each
model of MODELS from CHECKOUT, one process each, reusing sweep.py's runner: OUTDIR/NAME.out,
NAME.err, OUTDIR/twin.jsonl or gpu.jsonl, OUTDIR/summary.jsonl. Each run has three phases: phase0
(the train model built and invoked), phase1 (the eval model), end.
"""

import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)  # sweep.py puts validation/ (run_answers) on it too
from sweep import env_json, run_entries  # noqa: E402

# The commit swept (session 56); any later one may behave differently.
COMMIT = "0e83c440a51cd63464fee34724d01b7c814ce39b"
DRIVER = os.path.join(HERE, "torchbench_driver.py")

# torchvision's initial weights under the file names the models' IMAGENET1K_V1 weights ask for in
# TORCH_HOME/hub/checkpoints (torch.hub.load_state_dict_from_url checks the hash only when it
# downloads): a fresh model's state_dict, the same sizes as the real ones.
TV_WEIGHTS = {
    "alexnet": "AlexNet_Weights",
    "densenet121": "DenseNet121_Weights",
    "mnasnet1_0": "MNASNet1_0_Weights",
    "mobilenet_v2": "MobileNet_V2_Weights",
    "mobilenet_v3_large": "MobileNet_V3_Large_Weights",
    "resnext50_32x4d": "ResNeXt50_32X4D_Weights",
    "resnet152": "ResNet152_Weights",
    "resnet18": "ResNet18_Weights",
    "resnet50": "ResNet50_Weights",
    "shufflenet_v2_x1_0": "ShuffleNet_V2_X1_0_Weights",
    "squeezenet1_1": "SqueezeNet1_1_Weights",
    "vgg16": "VGG16_Weights",
}

# timm's models of TorchBench whose pretrained weights timm fetches from the Hugging Face hub: a
# fresh model's state_dict as the hub cache's pytorch_model.bin (HF_HOME=CHECKOUT/.hf_home,
# HF_HUB_OFFLINE=1 reads it from snapshots/REVISION through refs/main); vit_giant_patch14_224
# (timm_vision_transformer_large, 4 GB of weights) is left out.
TIMM_MODELS = ("efficientnet_b0", "dm_nfnet_f0", "regnety_120", "resnest14d", "vit_small_patch16_224")

# distil-whisper/distil-medium.en's suppress_tokens (HF_CONFIGS), kept compact
# fmt: off
_DISTIL_MEDIUM_EN_SUPPRESS = [
    1, 2, 7, 8, 9, 10, 14, 25, 26, 27, 28, 29, 31, 58,
    59, 60, 61, 62, 63, 90, 91, 92, 93, 357, 366, 438, 532, 685,
    705, 796, 930, 1058, 1220, 1267, 1279, 1303, 1343, 1377, 1391, 1635, 1782, 1875,
    2162, 2361, 2488, 3467, 4008, 4211, 4600, 4808, 5299, 5855, 6329, 7203, 9609, 9959,
    10563, 10786, 11420, 11709, 11907, 13163, 13697, 13700, 14808, 15306, 16410, 16791, 17992, 19203,
    19510, 20724, 22305, 22935, 27007, 30109, 30420, 33409, 34949, 40283, 40493, 40549, 47282, 49146,
    50257, 50357, 50358, 50359, 50360, 50361,
]
# fmt: on

# t5-base's and t5-large's task_specific_params (the same in both copies read below; t5-small's differ in summarization only)
_T5_TASK_PARAMS = {
    "summarization": {
        "early_stopping": True,
        "length_penalty": 2.0,
        "max_length": 200,
        "min_length": 30,
        "no_repeat_ngram_size": 3,
        "num_beams": 4,
        "prefix": "summarize: ",
    },
    "translation_en_to_de": {
        "early_stopping": True,
        "max_length": 300,
        "num_beams": 4,
        "prefix": "translate English to German: ",
    },
    "translation_en_to_fr": {
        "early_stopping": True,
        "max_length": 300,
        "num_beams": 4,
        "prefix": "translate English to French: ",
    },
    "translation_en_to_ro": {
        "early_stopping": True,
        "max_length": 300,
        "num_beams": 4,
        "prefix": "translate English to Romanian: ",
    },
}

# The config.json of each Hugging Face hub model id that TorchBench's hf_* models read
# (AutoConfig.from_pretrained in torchbenchmark/util/framework/huggingface/basic_configs.py; no tokenizer, no
# weights: from_config), written into the hub cache as the timm weights are: the real configs' fields (memory
# depends on every size in them), read from public repositories' copies (where: above each).
HF_CONFIGS = {
    # Fu-fangteng/AIAA_4051_NLP_Final_Proj gpt2/config.json @a94fc8956c6fb9bc56dab1d601bfd2f625524b2b
    "gpt2": {
        "activation_function": "gelu_new",
        "architectures": ["GPT2LMHeadModel"],
        "attn_pdrop": 0.1,
        "bos_token_id": 50256,
        "embd_pdrop": 0.1,
        "eos_token_id": 50256,
        "initializer_range": 0.02,
        "layer_norm_epsilon": 1e-05,
        "model_type": "gpt2",
        "n_ctx": 1024,
        "n_embd": 768,
        "n_head": 12,
        "n_inner": None,
        "n_layer": 12,
        "n_positions": 1024,
        "reorder_and_upcast_attn": False,
        "resid_pdrop": 0.1,
        "scale_attn_by_inverse_layer_idx": False,
        "scale_attn_weights": True,
        "summary_activation": None,
        "summary_first_dropout": 0.1,
        "summary_proj_to_labels": True,
        "summary_type": "cls_index",
        "summary_use_proj": True,
        "task_specific_params": {"text-generation": {"do_sample": True, "max_length": 50}},
        "torch_dtype": "float32",
        "transformers_version": "4.54.0",
        "use_cache": True,
        "vocab_size": 50257,
    },
    # crurp/quantumbench-llm models/gpt2-large/config.json @a35be958dd19974240a4be0a2f850679668464f8
    "gpt2-large": {
        "activation_function": "gelu_new",
        "architectures": ["GPT2LMHeadModel"],
        "attn_pdrop": 0.1,
        "bos_token_id": 50256,
        "dtype": "float32",
        "embd_pdrop": 0.1,
        "eos_token_id": 50256,
        "initializer_range": 0.02,
        "layer_norm_epsilon": 1e-05,
        "model_type": "gpt2",
        "n_ctx": 1024,
        "n_embd": 1280,
        "n_head": 20,
        "n_inner": None,
        "n_layer": 36,
        "n_positions": 1024,
        "reorder_and_upcast_attn": False,
        "resid_pdrop": 0.1,
        "scale_attn_by_inverse_layer_idx": False,
        "scale_attn_weights": True,
        "summary_activation": None,
        "summary_first_dropout": 0.1,
        "summary_proj_to_labels": True,
        "summary_type": "cls_index",
        "summary_use_proj": True,
        "task_specific_params": {"text-generation": {"do_sample": True, "max_length": 50}},
        "transformers_version": "4.57.3",
        "use_cache": True,
        "vocab_size": 50257,
    },
    # learningexample/xformer t5-small/config.json @5b265be215eb739254fb2b3fecc501ba2e0c9b15
    "t5-small": {
        "_name_or_path": "t5-small",
        "architectures": ["T5ForConditionalGeneration"],
        "classifier_dropout": 0.0,
        "d_ff": 2048,
        "d_kv": 64,
        "d_model": 512,
        "decoder_start_token_id": 0,
        "dense_act_fn": "relu",
        "dropout_rate": 0.1,
        "eos_token_id": 1,
        "feed_forward_proj": "relu",
        "initializer_factor": 1.0,
        "is_encoder_decoder": True,
        "is_gated_act": False,
        "layer_norm_epsilon": 1e-06,
        "model_type": "t5",
        "n_positions": 512,
        "num_decoder_layers": 6,
        "num_heads": 8,
        "num_layers": 6,
        "output_past": True,
        "pad_token_id": 0,
        "relative_attention_max_distance": 128,
        "relative_attention_num_buckets": 32,
        # t5-small's summarization has no "prefix"; its translations are t5-base's and t5-large's
        "task_specific_params": _T5_TASK_PARAMS
        | {
            "summarization": {
                "early_stopping": True,
                "length_penalty": 2.0,
                "max_length": 200,
                "min_length": 30,
                "no_repeat_ngram_size": 3,
                "num_beams": 4,
            },
        },
        "torch_dtype": "float32",
        "transformers_version": "4.46.3",
        "use_cache": True,
        "vocab_size": 32128,
    },
    # bystrowska/idiom-paraphrasing models/t5-base/config.json @29dbeeda8a30187496f1778b286e72a6791bdedb
    "t5-base": {
        "_name_or_path": "t5-base",
        "architectures": ["T5ForConditionalGeneration"],
        "d_ff": 3072,
        "d_kv": 64,
        "d_model": 768,
        "decoder_start_token_id": 0,
        "dropout_rate": 0.1,
        "eos_token_id": 1,
        "feed_forward_proj": "relu",
        "initializer_factor": 1.0,
        "is_encoder_decoder": True,
        "layer_norm_epsilon": 1e-06,
        "model_type": "t5",
        "n_positions": 512,
        "num_decoder_layers": 12,
        "num_heads": 12,
        "num_layers": 12,
        "output_past": True,
        "pad_token_id": 0,
        "relative_attention_max_distance": 128,
        "relative_attention_num_buckets": 32,
        "task_specific_params": _T5_TASK_PARAMS,
        "transformers_version": "4.18.0",
        "use_cache": True,
        "vocab_size": 32128,
    },
    # fangbufang/SaL t5-large/config.json @377824c7808105fc6eaa989842a870979662f1d7
    "t5-large": {
        "architectures": ["T5ForConditionalGeneration"],
        "d_ff": 4096,
        "d_kv": 64,
        "d_model": 1024,
        "decoder_start_token_id": 0,
        "dropout_rate": 0.1,
        "eos_token_id": 1,
        "initializer_factor": 1.0,
        "is_encoder_decoder": True,
        "layer_norm_epsilon": 1e-06,
        "model_type": "t5",
        "n_positions": 512,
        "num_heads": 16,
        "num_layers": 24,
        "output_past": True,
        "pad_token_id": 0,
        "relative_attention_num_buckets": 32,
        "task_specific_params": _T5_TASK_PARAMS,
        "vocab_size": 32128,
    },
    # ibmm-unibe-ch/SMILES_or_SELFIES bart-base/config.json @d20ba5007f499e7d6d06a1714c7995aa42cf7c6e
    # but vocab_size 50265, not their 51201: as a copy of facebook/bart-base's config with
    # _name_or_path and vocab_size kept (omelnikov's spellchecker training script) has it
    "facebook/bart-base": {
        "_name_or_path": "bart-base",
        "activation_dropout": 0.1,
        "activation_function": "gelu",
        "add_bias_logits": False,
        "add_final_layer_norm": False,
        "architectures": ["BartModel"],
        "attention_dropout": 0.1,
        "bos_token_id": 0,
        "classif_dropout": 0.1,
        "classifier_dropout": 0.0,
        "d_model": 768,
        "decoder_attention_heads": 12,
        "decoder_ffn_dim": 3072,
        "decoder_layerdrop": 0.0,
        "decoder_layers": 6,
        "decoder_start_token_id": 2,
        "dropout": 0.1,
        "early_stopping": True,
        "encoder_attention_heads": 12,
        "encoder_ffn_dim": 3072,
        "encoder_layerdrop": 0.0,
        "encoder_layers": 6,
        "eos_token_id": 2,
        "forced_eos_token_id": 2,
        "forced_bos_token_id": 0,
        "gradient_checkpointing": False,
        "id2label": {"0": "LABEL_0", "1": "LABEL_1", "2": "LABEL_2"},
        "init_std": 0.02,
        "is_encoder_decoder": True,
        "label2id": {"LABEL_0": 0, "LABEL_1": 1, "LABEL_2": 2},
        "max_position_embeddings": 1024,
        "model_type": "bart",
        "no_repeat_ngram_size": 3,
        "normalize_before": False,
        "normalize_embedding": True,
        "num_beams": 4,
        "num_hidden_layers": 6,
        "pad_token_id": 1,
        "scale_embedding": False,
        "task_specific_params": {
            "summarization": {"length_penalty": 1.0, "max_length": 128, "min_length": 12, "num_beams": 4},
            "summarization_cnn": {"length_penalty": 2.0, "max_length": 142, "min_length": 56, "num_beams": 4},
            "summarization_xsum": {"length_penalty": 1.0, "max_length": 62, "min_length": 11, "num_beams": 6},
        },
        "torch_dtype": "float32",
        "transformers_version": "4.12.0.dev0",
        "use_cache": True,
        "vocab_size": 50265,
    },
    # Baiame/intent_detection models/albert-base-v2/config.json @f52115bcc15a800bc90f25ffd558392314980066
    # less a fine-tune's _name_or_path, id2label, label2id, problem_type
    "albert-base-v2": {
        "architectures": ["AlbertForSequenceClassification"],
        "attention_probs_dropout_prob": 0,
        "bos_token_id": 2,
        "classifier_dropout_prob": 0.1,
        "down_scale_factor": 1,
        "embedding_size": 128,
        "eos_token_id": 3,
        "gap_size": 0,
        "hidden_act": "gelu_new",
        "hidden_dropout_prob": 0,
        "hidden_size": 768,
        "initializer_range": 0.02,
        "inner_group_num": 1,
        "intermediate_size": 3072,
        "layer_norm_eps": 1e-12,
        "max_position_embeddings": 512,
        "model_type": "albert",
        "net_structure_type": 0,
        "num_attention_heads": 12,
        "num_hidden_groups": 1,
        "num_hidden_layers": 12,
        "num_memory_blocks": 0,
        "pad_token_id": 0,
        "position_embedding_type": "absolute",
        "torch_dtype": "float32",
        "transformers_version": "4.39.2",
        "type_vocab_size": 2,
        "vocab_size": 30000,
    },
    # voxelwerke/party models/distilbert-base-uncased/config.json @faebd84de5a41a082ab93cc42acdcb7b02b615fe
    # less a fine-tune's id2label, label2id
    "distilbert-base-uncased": {
        "activation": "gelu",
        "architectures": ["DistilBertForMaskedLM"],
        "attention_dropout": 0.1,
        "dim": 768,
        "dropout": 0.1,
        "hidden_dim": 3072,
        "initializer_range": 0.02,
        "max_position_embeddings": 512,
        "model_type": "distilbert",
        "n_heads": 12,
        "n_layers": 6,
        "pad_token_id": 0,
        "qa_dropout": 0.1,
        "seq_classif_dropout": 0.2,
        "sinusoidal_pos_embds": False,
        "tie_weights_": True,
        "vocab_size": 30522,
    },
    # jlealtru/website_tutorials notebooks/Longformer with IMDB.ipynb
    # @0199c9afaa6bc9ea4c869ef4602428aac4a8efd1
    # (model.config printed after from_pretrained)
    "allenai/longformer-base-4096": {
        "_name_or_path": "allenai/longformer-base-4096",
        "attention_mode": "longformer",
        "attention_probs_dropout_prob": 0.1,
        "attention_window": [512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512],
        "bos_token_id": 0,
        "eos_token_id": 2,
        "gradient_checkpointing": False,
        "hidden_act": "gelu",
        "hidden_dropout_prob": 0.1,
        "hidden_size": 768,
        "ignore_attention_mask": False,
        "initializer_range": 0.02,
        "intermediate_size": 3072,
        "layer_norm_eps": 1e-05,
        "max_position_embeddings": 4098,
        "model_type": "longformer",
        "num_attention_heads": 12,
        "num_hidden_layers": 12,
        "pad_token_id": 1,
        "sep_token_id": 2,
        "type_vocab_size": 1,
        "vocab_size": 50265,
    },
    # Hexdigest123/comment-checker model/xlm-roberta-base/config.json
    # @70accb1f8513addeb8f7ce0574e2a657d26187d5
    # less a fine-tune's id2label, label2id
    "xlm-roberta-base": {
        "add_cross_attention": False,
        "architectures": ["XLMRobertaForSequenceClassification"],
        "attention_probs_dropout_prob": 0.1,
        "bos_token_id": 0,
        "classifier_dropout": None,
        "dtype": "float32",
        "eos_token_id": 2,
        "hidden_act": "gelu",
        "hidden_dropout_prob": 0.1,
        "hidden_size": 768,
        "initializer_range": 0.02,
        "intermediate_size": 3072,
        "is_decoder": False,
        "layer_norm_eps": 1e-05,
        "max_position_embeddings": 514,
        "model_type": "xlm-roberta",
        "num_attention_heads": 12,
        "num_hidden_layers": 12,
        "output_past": True,
        "pad_token_id": 1,
        "position_embedding_type": "absolute",
        "tie_word_embeddings": True,
        "transformers_version": "5.14.1",
        "type_vocab_size": 1,
        "use_cache": True,
        "vocab_size": 250002,
    },
    # painebenjamin/taproot src/taproot/tasks/recognition/audio/transcription/whisper/distilled/
    # medium/model.py @bd05f99f6049c9aa950849ad9c62bba757526b9c: its DistilledWhisperMediumEnglishModel's
    # get_default_config (distil-whisper/distil-medium.en's weights, repackaged)
    "distil-whisper/distil-medium.en": {
        "activation_dropout": 0,
        "activation_function": "gelu",
        "apply_spec_augment": False,
        "architectures": ["WhisperForConditionalGeneration"],
        "attention_dropout": 0,
        "begin_suppress_tokens": [220, 50256],
        "bos_token_id": 50257,
        "classifier_proj_size": 256,
        "d_model": 1024,
        "decoder_attention_heads": 16,
        "decoder_ffn_dim": 4096,
        "decoder_layerdrop": 0,
        "decoder_layers": 2,
        "decoder_start_token_id": 50257,
        "dropout": 0,
        "encoder_attention_heads": 16,
        "encoder_ffn_dim": 4096,
        "encoder_layerdrop": 0,
        "encoder_layers": 24,
        "eos_token_id": 50256,
        "forced_decoder_ids": [[1, 50362]],
        "init_std": 0.02,
        "is_encoder_decoder": True,
        "mask_feature_length": 10,
        "mask_feature_min_masks": 0,
        "mask_feature_prob": 0,
        "mask_time_length": 10,
        "mask_time_min_masks": 2,
        "mask_time_prob": 0.05,
        "max_length": 448,
        "max_source_positions": 1500,
        "max_target_positions": 448,
        "median_filter_width": 7,
        "model_type": "whisper",
        "num_hidden_layers": 24,
        "num_mel_bins": 80,
        "pad_token_id": 50256,
        "scale_embedding": False,
        "suppress_tokens": _DISTIL_MEDIUM_EN_SUPPRESS,
        "torch_dtype": "float32",
        "use_cache": True,
        "use_weighted_layer_sum": False,
        "vocab_size": 51864,
    },
}

# (NAME, model, driver arguments after the model): the model's default batch sizes, 2 iterations of
# each test, both tests in one process but for moco (its constructor's init_process_group raises
# ValueError when called twice in a process: one process a test, as TorchBench's run.py runs them).
# Models that implement neither test on CUDA outside TorchBench's dynamo harness (simple_gpt,
# simple_gpt_tp_manual, llama_v2_7b_16h without a hub token) are left out; modded_nanogpt, whose
# train and eval raise NotImplementedError after its constructor, is kept for the constructor's memory.
_NAMES = """
resnet18 resnet50 resnet152 resnext50_32x4d alexnet vgg16 densenet121 squeezenet1_1 mobilenet_v2
mobilenet_v3_large shufflenet_v2_x1_0 mnasnet1_0 mobilenet_v2_quantized_qat resnet50_quantized_qat
timm_efficientnet timm_regnet timm_resnest timm_vovnet timm_nfnet timm_vision_transformer
timm_vision_transformer_large BERT_pytorch nanogpt llama modded_nanogpt cm3leon_generate demucs dcgan
pytorch_unet tts_angular nvidia_deeprecommender phlippe_resnet phlippe_densenet functorch_dp_cifar10
lennard_jones maml microbench_unbacked_tolist_sum pyhpc_equation_of_state pyhpc_isoneutral_mixing
pyhpc_turbulent_kinetic_energy
"""
MODELS = [(n, n, "") for n in _NAMES.split()] + [
    ("moco_train", "moco", "--tests train"),
    ("moco_eval", "moco", "--tests eval"),
]
# TorchBench's hf_* models (session 57, helper hf), after the 42 above: their hub configs from HF_CONFIGS
# (hf_Bert, hf_Bert_large, hf_BigBird, hf_Reformer and hf_Whisper build theirs in code); llava and
# moondream (hub weights) are left out.
_HF_NAMES = """
hf_Albert hf_Bart hf_Bert hf_Bert_large hf_BigBird hf_DistilBert hf_GPT2 hf_GPT2_large hf_Longformer
hf_Reformer hf_Roberta_base hf_T5 hf_T5_base hf_T5_generate hf_T5_large hf_Whisper hf_distil_whisper
"""
MODELS += [(n, n, "") for n in _HF_NAMES.split()]


def data(checkout):
    import torch
    import torchvision

    torch.manual_seed(0)
    ck = os.path.join(checkout, ".torch_home", "hub", "checkpoints")
    os.makedirs(ck, exist_ok=True)
    for name, weights in TV_WEIGHTS.items():
        url = getattr(torchvision.models, weights).IMAGENET1K_V1.url
        path = os.path.join(ck, os.path.basename(url))
        if not os.path.exists(path):
            torch.save(getattr(torchvision.models, name)().state_dict(), path)
    import timm

    for name in TIMM_MODELS:
        model = timm.create_model(name, pretrained=False)
        repo = model.pretrained_cfg["hf_hub_id"]
        cache = os.path.join(checkout, ".hf_home", "hub", "models--" + repo.replace("/", "--"))
        rev = "0" * 40
        path = os.path.join(cache, "snapshots", rev, "pytorch_model.bin")
        if not os.path.exists(path):
            os.makedirs(os.path.dirname(path), exist_ok=True)
            os.makedirs(os.path.join(cache, "refs"), exist_ok=True)
            with open(os.path.join(cache, "refs", "main"), "w") as f:
                f.write(rev)
            torch.save(model.state_dict(), path)
    for repo, config in HF_CONFIGS.items():
        cache = os.path.join(checkout, ".hf_home", "hub", "models--" + repo.replace("/", "--"))
        rev = "0" * 40
        path = os.path.join(cache, "snapshots", rev, "config.json")
        os.makedirs(os.path.dirname(path), exist_ok=True)
        os.makedirs(os.path.join(cache, "refs"), exist_ok=True)
        with open(os.path.join(cache, "refs", "main"), "w") as f:
            f.write(rev)
        with open(path, "w") as f:
            json.dump(config, f, indent=2)


def main():
    mode, checkout = sys.argv[1], os.path.abspath(sys.argv[2])
    os.environ["TORCH_HOME"] = os.path.join(checkout, ".torch_home")
    os.environ["HF_HOME"] = os.path.join(checkout, ".hf_home")
    os.environ["HF_HUB_OFFLINE"] = "1"
    if mode == "_data":
        return data(checkout)
    if mode == "data" or not os.environ.get("NO_FAKE_DATA"):
        # its own process, so the runs' processes alone import torch under the twin or record.py
        subprocess.run([sys.executable, __file__, "_data", checkout], check=True)
    if mode == "data":
        return
    outdir, names = os.path.abspath(sys.argv[3]), sys.argv[4:]
    os.makedirs(outdir, exist_ok=True)
    os.environ.setdefault("GPU", "h200")
    with open(os.path.join(outdir, f"env_torchbench_{mode}.json"), "w") as f:
        json.dump(env_json(), f)
    todo = [m for m in MODELS if not names or m[0] in names]
    entries = ((name, checkout, ".", [DRIVER, model, *args.split()], 1) for name, model, args in todo)
    run_entries(mode, outdir, entries, ranked=False)


if __name__ == "__main__":
    main()
