//! A Hugging Face `config.json`, read without guessing.
//!
//! [`HfConfig`] keeps the raw JSON object; each family normalises it into
//! its own typed config (`families::<family>`), taking transformers' class
//! defaults (`configuration_<family>.py`) for absent fields, and rejecting
//! fields that change memory but are not modelled.

use std::collections::BTreeMap;

use serde_json::{Map, Value};

use crate::error::{ModelError, Result};

/// A parsed `config.json`.
#[derive(Debug, Clone)]
pub struct HfConfig {
    /// `model_type`
    pub model_type: String,
    raw: Map<String, Value>,
    /// the integer fields read with a class default because the config
    /// leaves them out, with the default taken ([`HfConfig::defaulted`])
    defaulted: std::sync::Arc<std::sync::Mutex<BTreeMap<String, i64>>>,
}

impl PartialEq for HfConfig {
    fn eq(&self, other: &Self) -> bool {
        self.model_type == other.model_type && self.raw == other.raw
    }
}

impl HfConfig {
    /// Parse the text of a `config.json`.
    pub fn parse(text: &str) -> Result<Self> {
        let v: Value = serde_json::from_str(text).map_err(|e| ModelError::Json(e.to_string()))?;
        Self::from_value(v)
    }

    /// From a JSON value (an object with `model_type`).
    pub fn from_value(v: Value) -> Result<Self> {
        let Value::Object(raw) = v else {
            return Err(ModelError::Json("the top level is not an object".into()));
        };
        let model_type = match raw.get("model_type") {
            Some(Value::String(s)) => s.clone(),
            Some(_) => {
                return Err(ModelError::Field {
                    field: "model_type".into(),
                    detail: "not a string".into(),
                })
            }
            None => {
                return Err(ModelError::Field {
                    field: "model_type".into(),
                    detail: "missing (every transformers config.json names its family)".into(),
                })
            }
        };
        Ok(HfConfig {
            model_type,
            raw,
            defaulted: Default::default(),
        })
    }

    /// The integer fields (sizes, counts) a family read with its class
    /// default because this config leaves them out, by name, with the value
    /// taken: what a report should say it filled in.
    pub fn defaulted(&self) -> BTreeMap<String, i64> {
        self.defaulted.lock().map(|m| m.clone()).unwrap_or_default()
    }

    /// The raw value of a field (`null` counts as absent).
    pub fn get(&self, key: &str) -> Option<&Value> {
        self.raw.get(key).filter(|v| !v.is_null())
    }

    /// Whether a field is present and not `null`.
    pub fn has(&self, key: &str) -> bool {
        self.get(key).is_some()
    }

    fn bad(key: &str, what: &str, v: &Value) -> ModelError {
        ModelError::Field {
            field: key.into(),
            detail: format!("expected {what}, found {v}"),
        }
    }

    /// An integer field, or `default` when absent.
    pub fn int(&self, key: &str, default: i64) -> Result<i64> {
        let v = self.opt_int(key)?;
        if v.is_none() {
            if let Ok(mut m) = self.defaulted.lock() {
                m.insert(key.to_owned(), default);
            }
        }
        Ok(v.unwrap_or(default))
    }

    /// An integer field that may be absent.
    pub fn opt_int(&self, key: &str) -> Result<Option<i64>> {
        match self.get(key) {
            None => Ok(None),
            Some(v) => v
                .as_i64()
                .or_else(|| v.as_f64().filter(|f| f.fract() == 0.0).map(|f| f as i64))
                .map(Some)
                .ok_or_else(|| Self::bad(key, "an integer", v)),
        }
    }

    /// A positive integer field (sizes, counts), or `default` when absent.
    pub fn size(&self, key: &str, default: i64) -> Result<i64> {
        let v = self.int(key, default)?;
        if v <= 0 {
            return Err(ModelError::Field {
                field: key.into(),
                detail: format!("must be positive, found {v}"),
            });
        }
        Ok(v)
    }

    /// A required positive integer field.
    pub fn required_size(&self, key: &str) -> Result<i64> {
        match self.opt_int(key)? {
            Some(v) if v > 0 => Ok(v),
            Some(v) => Err(ModelError::Field {
                field: key.into(),
                detail: format!("must be positive, found {v}"),
            }),
            None => Err(ModelError::Field {
                field: key.into(),
                detail: "missing".into(),
            }),
        }
    }

    /// A number field, or `default` when absent.
    pub fn float(&self, key: &str, default: f64) -> Result<f64> {
        self.opt_float(key).map(|v| v.unwrap_or(default))
    }

    /// A number field that may be absent.
    pub fn opt_float(&self, key: &str) -> Result<Option<f64>> {
        match self.get(key) {
            None => Ok(None),
            Some(v) => v
                .as_f64()
                .map(Some)
                .ok_or_else(|| Self::bad(key, "a number", v)),
        }
    }

    /// A boolean field, or `default` when absent.
    pub fn boolean(&self, key: &str, default: bool) -> Result<bool> {
        match self.get(key) {
            None => Ok(default),
            Some(v) => v
                .as_bool()
                .ok_or_else(|| Self::bad(key, "true or false", v)),
        }
    }

    /// A string field that may be absent.
    pub fn string(&self, key: &str) -> Result<Option<&str>> {
        match self.get(key) {
            None => Ok(None),
            Some(v) => v
                .as_str()
                .map(Some)
                .ok_or_else(|| Self::bad(key, "a string", v)),
        }
    }

    /// Refuse a field that changes memory when it is set to anything but
    /// one of the values that are modelled.
    pub fn reject_unless(&self, key: &str, allowed: &[&Value], why: &str) -> Result<()> {
        match self.get(key) {
            Some(v) if !allowed.contains(&v) => Err(ModelError::Unsupported(format!(
                "config field `{key}` = {v} ({why})"
            ))),
            _ => Ok(()),
        }
    }

    /// Refuse a field that changes memory whenever it is present.
    pub fn reject_present(&self, key: &str, why: &str) -> Result<()> {
        match self.get(key) {
            Some(v) => Err(ModelError::Unsupported(format!(
                "config field `{key}` = {v} ({why})"
            ))),
            None => Ok(()),
        }
    }

    /// The raw object (to echo it back in reports).
    pub fn raw(&self) -> &Map<String, Value> {
        &self.raw
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_fields_and_defaults() {
        let c = HfConfig::parse(
            r#"{"model_type": "llama", "hidden_size": 4096, "rope_theta": 5e5, "x": null}"#,
        )
        .unwrap();
        assert_eq!(c.model_type, "llama");
        assert_eq!(c.size("hidden_size", 1).unwrap(), 4096);
        assert_eq!(c.size("num_hidden_layers", 32).unwrap(), 32);
        assert_eq!(c.float("rope_theta", 1e4).unwrap(), 5e5);
        assert!(!c.has("x"));
    }

    #[test]
    fn bad_input_is_an_error() {
        assert!(matches!(HfConfig::parse("[1]"), Err(ModelError::Json(_))));
        assert!(matches!(HfConfig::parse("{"), Err(ModelError::Json(_))));
        assert!(HfConfig::parse(r#"{"hidden_size": 1}"#).is_err());
        let c = HfConfig::parse(r#"{"model_type": "llama", "hidden_size": "big"}"#).unwrap();
        let e = c.size("hidden_size", 1).unwrap_err().to_string();
        assert!(e.contains("hidden_size") && e.contains("integer"), "{e}");
        let c = HfConfig::parse(r#"{"model_type": "llama", "hidden_size": -3}"#).unwrap();
        assert!(c.size("hidden_size", 1).is_err());
    }
}
