//! transformers 5.17 `cache_utils.py`: the key/value cache a decoder's
//! forward and `generate()` update, one layer per `layer_types` entry
//! (`get_layer_types_and_kwargs`: `layer_types`, else all sliding when
//! `sliding_window` is set, else all full):
//!
//! | cache | layers | allocations (CUDA) |
//! | --- | --- | --- |
//! | `DynamicCache` | `DynamicLayer`, `DynamicSlidingWindowLayer` | each update `cat`s the new keys and values onto the old (the first onto an empty tensor); 8 bytes for a sliding layer's window |
//! | `StaticCache` | `StaticLayer`, `StaticSlidingWindowLayer` | the first update's `zeros` of `(b, kv_heads, max_cache_len, d)` for keys and values and the 8-byte `cumulative_length`; then per update an `arange` and the positions (`index_copy_` in place), or a full window's `roll` of each and an 8-byte index |

use vramscope_engine::{DType, Device, Tensor};

use crate::error::{ModelError, Result};

/// One layer of a [`KvCache`].
pub(crate) enum CacheLayer {
    /// `DynamicLayer`: `keys = torch.cat([keys, key_states], dim=-2)` (the
    /// first update concatenates onto `torch.tensor([])`, which takes no
    /// memory: a full copy of `key_states`), same for values.
    Full {
        /// `self.keys`
        keys: Option<Tensor>,
        /// `self.values`
        values: Option<Tensor>,
        /// `self.dtype` (the first key states' dtype)
        dtype: Option<DType>,
    },
    /// `DynamicSlidingWindowLayer(sliding_window)`: its lazy initialisation
    /// moves `_sliding_window_tensor` (an int64 scalar) to the device (8
    /// bytes); `update` concatenates, keeps the last `sliding_window - 1`
    /// tokens (a view) and returns the full states.
    Sliding {
        /// `self.sliding_window`
        window: i64,
        /// `self.cumulative_length`
        cumulative: i64,
        /// `self.keys`
        keys: Option<Tensor>,
        /// `self.values`
        values: Option<Tensor>,
        /// `self._sliding_window_tensor` once on the device
        window_tensor: Option<Tensor>,
        /// `self.dtype` (the first key states' dtype)
        dtype: Option<DType>,
    },
    /// `StaticLayer(max_cache_len)` or, `sliding`,
    /// `StaticSlidingWindowLayer(max_cache_len, sliding_window)` (a static
    /// layer of `min(sliding_window, max_cache_len)` tokens).
    Static {
        /// `self.max_cache_len`
        max_len: i64,
        /// a `StaticSlidingWindowLayer`
        sliding: bool,
        /// the tokens written (`cumulative_length`'s value, or a sliding
        /// layer's `cumulative_length_int`)
        cumulative: i64,
        /// what `lazy_initialization` made
        state: Option<StaticState>,
    },
}

/// A static layer's tensors (`StaticLayer.lazy_initialization`).
pub(crate) struct StaticState {
    /// `self.keys = torch.zeros((b, kv_heads, max_cache_len, k_head_dim), dtype)`
    keys: Tensor,
    /// `self.values`, the same with the value head dim
    values: Tensor,
    /// `self.cumulative_length.to(self.device)`: a 0-dim int64
    cumulative: Tensor,
}

impl CacheLayer {
    /// `is_sliding`.
    pub(crate) fn is_sliding(&self) -> bool {
        match self {
            CacheLayer::Sliding { .. } => true,
            CacheLayer::Static { sliding, .. } => *sliding,
            CacheLayer::Full { .. } => false,
        }
    }
}

/// transformers' `Cache` of `DynamicCache` or `StaticCache` layers.
pub(crate) struct KvCache {
    pub(crate) layers: Vec<CacheLayer>,
}

/// The name the families' forwards use: they make only `DynamicCache`s
/// (and are handed `generate()`'s cache, of either kind).
pub(crate) type DynamicCache = KvCache;

impl KvCache {
    /// `DynamicCache(config=config)`; `sliding[i]`: `Some(window)` for a
    /// sliding layer.
    pub(crate) fn new(sliding: &[Option<i64>]) -> Self {
        KvCache {
            layers: sliding
                .iter()
                .map(|s| match s {
                    None => CacheLayer::Full {
                        keys: None,
                        values: None,
                        dtype: None,
                    },
                    Some(w) => CacheLayer::Sliding {
                        window: *w,
                        cumulative: 0,
                        keys: None,
                        values: None,
                        window_tensor: None,
                        dtype: None,
                    },
                })
                .collect(),
        }
    }

    /// `StaticCache(config=config, max_cache_len=max_len)`: nothing on the
    /// device until a layer's first update (its `cumulative_length` is a
    /// CPU tensor until then).
    pub(crate) fn new_static(sliding: &[Option<i64>], max_len: i64) -> Self {
        KvCache {
            layers: sliding
                .iter()
                .map(|s| CacheLayer::Static {
                    // StaticSlidingWindowLayer: min(sliding_window, max_cache_len)
                    max_len: s.map_or(max_len, |w| w.min(max_len)),
                    sliding: s.is_some(),
                    cumulative: 0,
                    state: None,
                })
                .collect(),
        }
    }

    /// `is_compileable`: every layer's (the static layers' class attribute).
    pub(crate) fn is_compileable(&self) -> bool {
        self.layers
            .iter()
            .all(|l| matches!(l, CacheLayer::Static { .. }))
    }

    /// `get_seq_length(layer_idx)` (a static layer's is its device
    /// `cumulative_length` once initialised: its value here).
    pub(crate) fn get_seq_length(&self, idx: usize) -> i64 {
        match self.layers.get(idx) {
            Some(CacheLayer::Full { keys: Some(k), .. }) if k.numel() > 0 => k.size(-2),
            Some(CacheLayer::Sliding { cumulative, .. }) => *cumulative,
            Some(CacheLayer::Static {
                cumulative, state, ..
            }) if state.is_some() => *cumulative,
            _ => 0,
        }
    }

    /// `get_mask_sizes(query_length, layer_idx)` → `(kv_length, kv_offset)`.
    pub(crate) fn get_mask_sizes(&self, q_len: i64, idx: usize) -> (i64, i64) {
        match self.layers.get(idx) {
            Some(CacheLayer::Sliding {
                window, cumulative, ..
            }) => {
                let kv_offset = (cumulative - window + 1).max(0);
                if *cumulative >= *window {
                    (window - 1 + q_len, kv_offset)
                } else {
                    (cumulative + q_len, kv_offset)
                }
            }
            Some(CacheLayer::Static {
                max_len,
                sliding: false,
                ..
            }) => (*max_len, 0),
            Some(CacheLayer::Static {
                max_len: w,
                sliding: true,
                cumulative,
                ..
            }) => {
                // StaticSlidingWindowLayer.get_mask_sizes
                let kv_offset = (cumulative - w + 1).max(0);
                if *cumulative >= *w {
                    (w + q_len - 1, kv_offset)
                } else if cumulative + q_len > *w {
                    (cumulative + q_len, kv_offset)
                } else {
                    (*w, kv_offset)
                }
            }
            Some(_) => (self.get_seq_length(idx) + q_len, 0),
            None => (q_len, 0),
        }
    }

    /// `past_key_values.update(key_states, value_states, layer_idx)` →
    /// the keys and values attention uses.
    pub(crate) fn update(
        &mut self,
        k: &Tensor,
        v: &Tensor,
        idx: usize,
    ) -> Result<(Tensor, Tensor)> {
        let layer = self
            .layers
            .get_mut(idx)
            .ok_or_else(|| ModelError::Unsupported(format!("cache layer {idx}")))?;
        match layer {
            CacheLayer::Full {
                keys,
                values,
                dtype,
            } => {
                // lazy_initialization: `self.dtype = key_states.dtype`; both
                // empty tensors take it, so the first `cat` of the values
                // promotes them to the keys' dtype (fp32 keys after RoPE under
                // autocast: fp32 value states too)
                let dt = *dtype.get_or_insert(k.dtype());
                let nk = cat_onto(keys.as_ref(), k, dt)?;
                *keys = Some(nk.clone());
                let nv = cat_onto(values.as_ref(), v, dt)?;
                *values = Some(nv.clone());
                Ok((nk, nv))
            }
            CacheLayer::Sliding {
                window,
                cumulative,
                keys,
                values,
                window_tensor,
                dtype,
            } => {
                let dt = *dtype.get_or_insert(k.dtype());
                if window_tensor.is_none() {
                    // lazy_initialization: self._sliding_window_tensor.to(self.device)
                    let rt = k.runtime();
                    *window_tensor = Some(rt.scalar_tensor(DType::I64, Device::Cuda)?);
                }
                *cumulative += k.size(-2);
                let fk = cat_onto(keys.as_ref(), k, dt)?;
                let fv = cat_onto(values.as_ref(), v, dt)?;
                // full_key_states[:, :, -self.sliding_window + 1:, :]
                *keys = Some(fk.slice(2, Some(-*window + 1), None));
                *values = Some(fv.slice(2, Some(-*window + 1), None));
                Ok((fk, fv))
            }
            CacheLayer::Static {
                max_len,
                sliding,
                cumulative,
                state,
            } => {
                if state.is_none() {
                    *state = Some(StaticState::new(k, v, *max_len)?);
                }
                let st = state.as_ref().expect("initialised above");
                let kv = k.size(-2);
                let current = *cumulative;
                *cumulative += kv;
                if *sliding {
                    st.update_sliding(k, v, current, *max_len)
                } else {
                    st.write(k, v)?;
                    Ok((st.keys.clone(), st.values.clone()))
                }
            }
        }
    }

    /// The cache's tensors in the order they are released when the cache
    /// dies (`list_dealloc` releases the layers last to first; each layer's
    /// `__dict__` releases its attributes in the order they were set:
    /// `keys`, `values` (set to `None` in `__init__`), then a dynamic
    /// sliding layer's `_sliding_window_tensor` or a static layer's
    /// `cumulative_length`).
    pub(crate) fn into_retained(self) -> Vec<Tensor> {
        let mut v = Vec::new();
        for layer in self.layers.into_iter().rev() {
            match layer {
                CacheLayer::Full { keys, values, .. } => {
                    v.extend(keys);
                    v.extend(values);
                }
                CacheLayer::Sliding {
                    keys,
                    values,
                    window_tensor,
                    ..
                } => {
                    v.extend(keys);
                    v.extend(values);
                    v.extend(window_tensor);
                }
                CacheLayer::Static { state, .. } => {
                    if let Some(s) = state {
                        v.push(s.keys);
                        v.push(s.values);
                        v.push(s.cumulative);
                    }
                }
            }
        }
        v
    }
}

impl StaticState {
    /// `lazy_initialization(key_states, value_states)`: keys and values
    /// zeroed in the key states' dtype, then `cumulative_length` moved to
    /// the device.
    fn new(k: &Tensor, v: &Tensor, max_len: i64) -> Result<Self> {
        let rt = k.runtime();
        let (b, heads) = (k.size(0), k.size(1));
        let keys = rt.zeros(&[b, heads, max_len, k.size(-1)], k.dtype(), Device::Cuda)?;
        let values = rt.zeros(&[b, heads, max_len, v.size(-1)], k.dtype(), Device::Cuda)?;
        let cumulative = rt.scalar_tensor(DType::I64, Device::Cuda)?;
        Ok(StaticState {
            keys,
            values,
            cumulative,
        })
    }

    /// `cache_position = torch.arange(kv_length) + self.cumulative_length`
    /// (the `arange` dies after the sum), `self.cumulative_length.add_(kv_length)`
    /// and `index_copy_` of the keys and values on dim 2, all in place;
    /// `cache_position` dies at return.
    fn write(&self, k: &Tensor, v: &Tensor) -> Result<()> {
        let rt = k.runtime();
        let cache_position = {
            let ar = rt.arange(k.size(-2), DType::I64, Device::Cuda)?;
            ar.add(&self.cumulative)?
        };
        self.keys.index_copy_(2, &cache_position, k)?;
        self.values.index_copy_(2, &cache_position, v)?;
        drop(cache_position);
        Ok(())
    }

    /// `StaticSlidingWindowLayer.update` with `current` tokens written
    /// before this one's `kv_length` and a window of `w`.
    fn update_sliding(
        &self,
        k: &Tensor,
        v: &Tensor,
        current: i64,
        w: i64,
    ) -> Result<(Tensor, Tensor)> {
        let kv = k.size(-2);
        let (full_k, full_v) = if current >= w {
            if kv == 1 {
                // roll left by one, the new states written at index -1,
                // copied back; new_keys, new_values and index die at return
                let new_keys = self.keys.roll(-1, -2)?;
                let new_values = self.values.roll(-1, -2)?;
                let index = k.runtime().empty(&[1], DType::I64, Device::Cuda)?;
                new_keys.index_put_at_(&[None, None, Some(&index)], k)?;
                new_values.index_put_at_(&[None, None, Some(&index)], v)?;
                self.keys.copy_(&new_keys)?;
                self.values.copy_(&new_values)?;
                drop(new_keys);
                drop(new_values);
                drop(index);
                return Ok((self.keys.clone(), self.values.clone()));
            }
            (
                Tensor::cat(&[&self.keys.slice(2, Some(1), None), k], -2)?,
                Tensor::cat(&[&self.values.slice(2, Some(1), None), v], -2)?,
            )
        } else if current + kv > w {
            if current == 0 {
                (k.clone(), v.clone())
            } else {
                (
                    Tensor::cat(&[&self.keys.slice(2, None, Some(current)), k], -2)?,
                    Tensor::cat(&[&self.values.slice(2, None, Some(current)), v], -2)?,
                )
            }
        } else {
            self.write(k, v)?;
            return Ok((self.keys.clone(), self.values.clone()));
        };
        // self.keys.copy_(full_key_states[:, :, -self.max_cache_len:, :])
        self.keys.copy_(&full_k.slice(2, Some(-w), None))?;
        self.values.copy_(&full_v.slice(2, Some(-w), None))?;
        Ok((full_k, full_v))
    }
}

/// `torch.cat([self.keys, key_states], dim=-2)`, where the first update's
/// `self.keys` is `torch.tensor([], dtype=self.dtype, device)` (no memory,
/// skipped by `cat` for the shapes but not for the type promotion).
fn cat_onto(prev: Option<&Tensor>, new: &Tensor, dtype: DType) -> Result<Tensor> {
    let empty;
    let p = match prev {
        Some(p) => p,
        None => {
            empty = new.runtime().empty(&[0], dtype, new.device())?;
            &empty
        }
    };
    Ok(Tensor::cat(&[p, new], -2)?)
}
