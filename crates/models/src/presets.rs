//! Popular configs, embedded (`--model NAME`). Each is the model's published
//! `config.json` on the Hugging Face Hub, reduced to the fields that shape
//! memory.

use crate::config::HfConfig;
use crate::error::{ModelError, Result};

const PRESETS: &[(&str, &str)] = &[
    (
        "llama-3.1-8b",
        r#"{"model_type": "llama", "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 128256, "max_position_embeddings": 131072, "rms_norm_eps": 1e-05, "rope_theta": 500000.0, "rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 8192, "rope_type": "llama3"}, "tie_word_embeddings": false, "bos_token_id": 128000, "eos_token_id": 128001}"#,
    ),
    (
        "llama-3.1-70b",
        r#"{"model_type": "llama", "hidden_size": 8192, "intermediate_size": 28672, "num_hidden_layers": 80, "num_attention_heads": 64, "num_key_value_heads": 8, "vocab_size": 128256, "max_position_embeddings": 131072, "rms_norm_eps": 1e-05, "rope_theta": 500000.0, "rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 8192, "rope_type": "llama3"}, "tie_word_embeddings": false, "bos_token_id": 128000, "eos_token_id": 128001}"#,
    ),
    (
        "llama-3.2-1b",
        r#"{"model_type": "llama", "hidden_size": 2048, "intermediate_size": 8192, "num_hidden_layers": 16, "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 64, "vocab_size": 128256, "max_position_embeddings": 131072, "rms_norm_eps": 1e-05, "rope_theta": 500000.0, "rope_scaling": {"factor": 32.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 8192, "rope_type": "llama3"}, "tie_word_embeddings": true, "bos_token_id": 128000, "eos_token_id": 128001}"#,
    ),
    (
        "mistral-7b",
        r#"{"model_type": "mistral", "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 32768, "max_position_embeddings": 32768, "rms_norm_eps": 1e-05, "rope_theta": 1000000.0, "sliding_window": null, "tie_word_embeddings": false}"#,
    ),
    (
        "qwen2-7b",
        r#"{"model_type": "qwen2", "hidden_size": 3584, "intermediate_size": 18944, "num_hidden_layers": 28, "num_attention_heads": 28, "num_key_value_heads": 4, "vocab_size": 152064, "max_position_embeddings": 131072, "rms_norm_eps": 1e-06, "rope_theta": 1000000.0, "sliding_window": 131072, "use_sliding_window": false, "max_window_layers": 28, "tie_word_embeddings": false}"#,
    ),
    (
        "qwen3-8b",
        r#"{"model_type": "qwen3", "hidden_size": 4096, "intermediate_size": 12288, "num_hidden_layers": 36, "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 151936, "max_position_embeddings": 40960, "rms_norm_eps": 1e-06, "rope_theta": 1000000.0, "use_sliding_window": false, "tie_word_embeddings": false}"#,
    ),
    (
        "qwen3-0.6b",
        r#"{"model_type": "qwen3", "hidden_size": 1024, "intermediate_size": 3072, "num_hidden_layers": 28, "num_attention_heads": 16, "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 151936, "max_position_embeddings": 40960, "rms_norm_eps": 1e-06, "rope_theta": 1000000.0, "use_sliding_window": false, "tie_word_embeddings": true}"#,
    ),
    (
        "phi-3-mini",
        r#"{"model_type": "phi3", "hidden_size": 3072, "intermediate_size": 8192, "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 32, "vocab_size": 32064, "max_position_embeddings": 4096, "original_max_position_embeddings": 4096, "rms_norm_eps": 1e-05, "rope_theta": 10000.0, "sliding_window": 2047, "pad_token_id": 32000, "tie_word_embeddings": false}"#,
    ),
    (
        "gemma-2-9b",
        r#"{"model_type": "gemma2", "hidden_size": 3584, "intermediate_size": 14336, "num_hidden_layers": 42, "num_attention_heads": 16, "num_key_value_heads": 8, "head_dim": 256, "vocab_size": 256000, "max_position_embeddings": 8192, "rms_norm_eps": 1e-06, "rope_theta": 10000.0, "sliding_window": 4096, "query_pre_attn_scalar": 256, "attn_logit_softcapping": 50.0, "final_logit_softcapping": 30.0, "hidden_activation": "gelu_pytorch_tanh"}"#,
    ),
    (
        "gpt2",
        r#"{"model_type": "gpt2", "n_embd": 768, "n_layer": 12, "n_head": 12, "n_positions": 1024, "vocab_size": 50257}"#,
    ),
    (
        "gpt2-xl",
        r#"{"model_type": "gpt2", "n_embd": 1600, "n_layer": 48, "n_head": 25, "n_positions": 1024, "vocab_size": 50257}"#,
    ),
    (
        "bert-base-uncased",
        r#"{"model_type": "bert", "hidden_size": 768, "num_hidden_layers": 12, "num_attention_heads": 12, "intermediate_size": 3072, "vocab_size": 30522, "max_position_embeddings": 512, "type_vocab_size": 2}"#,
    ),
    (
        "roberta-base",
        r#"{"model_type": "roberta", "hidden_size": 768, "num_hidden_layers": 12, "num_attention_heads": 12, "intermediate_size": 3072, "vocab_size": 50265, "max_position_embeddings": 514, "type_vocab_size": 1, "pad_token_id": 1, "layer_norm_eps": 1e-05}"#,
    ),
    (
        "vit-base-patch16-224",
        r#"{"model_type": "vit", "hidden_size": 768, "num_hidden_layers": 12, "num_attention_heads": 12, "intermediate_size": 3072, "image_size": 224, "patch_size": 16, "num_channels": 3, "num_labels": 1000}"#,
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
}
