//! The longest generation at a batch: the most new tokens for a prompt, and
//! the longest prompt for a number of new tokens, under the limit.
//!
//! A run of `N` new tokens is a prefix of a run of more: its steps are the
//! longer run's (`MinLengthLogitsProcessor` and `MinNewTokens...` mask the
//! EOS in every step of both, the stopping criteria only compare), and
//! after its last token's processing `generate()` only frees. So one run
//! of the most new tokens asked for finds the step that runs out, and one
//! more run decides whether that step's own token still fits (the step ran
//! out in the next forward) or not. The prompt has no such prefix: it is
//! searched as the batch is (doubling, then bisection).
//!
//! A `StaticCache` has no such prefix either: it is sized for prompt + N - 1
//! tokens at the prefill, so the new tokens are searched the same way.
//!
//! Both are bounded by the positions the model declares
//! ([`vramscope_models::max_positions`]): prompt + new tokens never pass them.

use vramscope_models::{
    estimate, max_positions, CacheKind, Estimate, EstimateOptions, HfConfig, Mode, ModelError,
    Result, Workload,
};

use crate::search::{MaxBatch, Try};

/// The most new tokens that fit.
#[derive(Debug, Clone)]
pub struct MostNewTokens {
    /// the most new tokens whose whole `generate()` fits (0: not even one)
    pub new_tokens: i64,
    /// the run of `up_to` new tokens, which ran out after `new_tokens`
    /// (or fitted: then `new_tokens == up_to`)
    pub long_run: Estimate,
    /// the bound searched: the one asked for, cut to the model's positions
    pub up_to: i64,
    /// the model's positions, when they cut the bound asked for
    pub positions_cap: Option<i64>,
    /// the run at `new_tokens` (`None` for 0)
    pub at_most: Option<Estimate>,
}

/// The most new tokens `workload` (`--mode generate`, its batch and prompt)
/// can generate under `options`' limit, up to `up_to`.
pub fn most_new_tokens(
    config: &HfConfig,
    workload: &Workload,
    options: &EstimateOptions,
    up_to: i64,
) -> Result<MostNewTokens> {
    check_generate(workload)?;
    let positions = max_positions(config)?;
    let (up_to, positions_cap) = match positions {
        Some(p) if workload.seq >= p => {
            return Err(ModelError::Unsupported(format!(
                "a prompt of {} tokens leaves no new token under the model's \
                 max_position_embeddings ({p})",
                workload.seq
            )))
        }
        Some(p) if workload.seq + up_to > p => (p - workload.seq, Some(p)),
        _ => (up_to, None),
    };
    let with = |n: i64| Workload {
        new_tokens: n,
        ..workload.clone()
    };
    let long_run = estimate(config, &with(up_to), options)?;
    if long_run.oom.is_none() {
        return Ok(MostNewTokens {
            new_tokens: up_to,
            at_most: Some(long_run.clone()),
            long_run,
            up_to,
            positions_cap,
        });
    }
    if workload.cache == CacheKind::Static {
        // (a shorter static run is no prefix of this one)
        let found = crate::search::search_by(
            &mut |n| estimate(config, &with(n), options),
            "new tokens",
            up_to,
            &mut |_| {},
        )?;
        return Ok(MostNewTokens {
            new_tokens: found.max_batch,
            long_run,
            up_to,
            positions_cap,
            at_most: found.at_max,
        });
    }
    // an out-of-memory before the decode: not one token
    if long_run.phases.iter().all(|p| p.name != "decode") {
        return Ok(MostNewTokens {
            new_tokens: 0,
            long_run,
            up_to,
            positions_cap,
            at_most: None,
        });
    }
    // steps 0..k-1 ended; step k (token k's processing, then forward k+1)
    // ran out: k + 1 tokens fit if it was in the forward
    let k = long_run.decode_steps.len() as i64;
    let next = estimate(config, &with(k + 1), options)?;
    let (n, at) = if next.oom.is_none() {
        (k + 1, Some(next))
    } else if k >= 1 {
        (k, Some(estimate(config, &with(k), options)?))
    } else {
        (0, None)
    };
    Ok(MostNewTokens {
        new_tokens: n,
        long_run,
        up_to,
        positions_cap,
        at_most: at,
    })
}

/// The longest prompt for `workload`'s batch and new tokens: the search
/// [`crate::max_batch`] runs, over the prompt's length (the tries' `batch`
/// is the prompt's length).
pub fn longest_prompt(
    config: &HfConfig,
    workload: &Workload,
    options: &EstimateOptions,
    progress: &mut dyn FnMut(&Try),
) -> Result<MaxBatch> {
    check_generate(workload)?;
    // the prompt and its new tokens within the model's positions
    let cap = match max_positions(config)? {
        Some(p) if workload.new_tokens >= p => {
            return Err(ModelError::Unsupported(format!(
                "{} new tokens leave no prompt under the model's \
                 max_position_embeddings ({p})",
                workload.new_tokens
            )))
        }
        // (the prompt + new tokens within the positions)
        Some(p) => p - workload.new_tokens,
        None => crate::MAX_BATCH_CAP,
    };
    // the batch search over a workload whose "batch" is the prompt length
    let search = PromptSearch {
        config,
        workload,
        options,
    };
    search.run(cap, progress)
}

struct PromptSearch<'a> {
    config: &'a HfConfig,
    workload: &'a Workload,
    options: &'a EstimateOptions,
}

impl PromptSearch<'_> {
    fn run(&self, cap: i64, progress: &mut dyn FnMut(&Try)) -> Result<MaxBatch> {
        crate::search::search_by(
            &mut |seq| {
                let w = Workload {
                    seq,
                    ..self.workload.clone()
                };
                estimate(self.config, &w, self.options)
            },
            "prompt",
            cap,
            progress,
        )
    }
}

fn check_generate(workload: &Workload) -> Result<()> {
    if workload.mode != Mode::Generate {
        return Err(vramscope_models::ModelError::Unsupported(format!(
            "the longest context is searched for --mode generate (got --mode {})",
            workload.mode.name()
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use vramscope_models::Task;

    /// A model whose growing cache outgrows 255 MB of the H100 within a few
    /// hundred tokens (the decode test of `vramscope-models`).
    fn setup() -> (HfConfig, EstimateOptions) {
        let c = HfConfig::parse(
            r#"{"model_type":"llama","hidden_size":256,"intermediate_size":512,
            "num_hidden_layers":2,"num_attention_heads":4,"num_key_value_heads":4,
            "vocab_size":32000,"eos_token_id":2}"#,
        )
        .unwrap();
        let o = EstimateOptions {
            memory_fraction: Some(0.003),
            ..EstimateOptions::default()
        };
        (c, o)
    }

    fn fits(c: &HfConfig, o: &EstimateOptions, seq: i64, n: i64) -> bool {
        let w = Workload::generate(Task::Causal, 64, seq, n);
        estimate(c, &w, o).unwrap().oom.is_none()
    }

    #[test]
    fn a_static_cache_s_most_new_tokens_fit_and_one_more_does_not() {
        let (c, o) = setup();
        let w = Workload {
            cache: vramscope_models::CacheKind::Static,
            ..Workload::generate(Task::Causal, 64, 64, 400)
        };
        let m = most_new_tokens(&c, &w, &o, 400).unwrap();
        let n = m.new_tokens;
        assert!(n > 6 && n < 400, "{n}");
        let fits = |n| {
            let w = Workload {
                new_tokens: n,
                ..w.clone()
            };
            estimate(&c, &w, &o).unwrap().oom.is_none()
        };
        assert!(fits(n) && !fits(n + 1));
    }

    #[test]
    fn the_most_new_tokens_fit_and_one_more_does_not() {
        let (c, o) = setup();
        let w = Workload::generate(Task::Causal, 64, 64, 400);
        let m = most_new_tokens(&c, &w, &o, 400).unwrap();
        let n = m.new_tokens;
        assert!(n > 6 && n < 400, "{n}");
        assert!(fits(&c, &o, 64, n));
        assert!(!fits(&c, &o, 64, n + 1));
        // a bound that fits is the answer
        let all = most_new_tokens(&c, &w, &o, n).unwrap();
        assert_eq!(all.new_tokens, n);
    }

    #[test]
    fn the_longest_prompt_fits_and_one_more_does_not() {
        let (c, o) = setup();
        let w = Workload::generate(Task::Causal, 64, 1, 8);
        let mb = longest_prompt(&c, &w, &o, &mut |_| {}).unwrap();
        let s = mb.max_batch;
        assert!(s > 1, "{s}");
        assert!(fits(&c, &o, s, 8));
        assert!(!fits(&c, &o, s + 1, 8));
        let train = Workload::train(Task::Causal, 1, 8);
        assert!(most_new_tokens(&c, &train, &o, 8).is_err());
    }

    #[test]
    fn the_model_s_positions_bound_both_searches() {
        let c = HfConfig::parse(
            r#"{"model_type":"llama","hidden_size":64,"intermediate_size":128,
            "num_hidden_layers":1,"num_attention_heads":4,"vocab_size":1000,
            "max_position_embeddings":100}"#,
        )
        .unwrap();
        let o = EstimateOptions::default();
        let m =
            most_new_tokens(&c, &Workload::generate(Task::Causal, 2, 30, 500), &o, 500).unwrap();
        assert_eq!(
            (m.new_tokens, m.up_to, m.positions_cap),
            (70, 70, Some(100))
        );
        let mb = longest_prompt(
            &c,
            &Workload::generate(Task::Causal, 2, 1, 8),
            &o,
            &mut |_| {},
        )
        .unwrap();
        assert_eq!(mb.max_batch, 92);
        // a prompt (or new tokens) that fill the positions: refused
        let full = Workload::generate(Task::Causal, 2, 100, 5);
        let e = most_new_tokens(&c, &full, &o, 5).unwrap_err().to_string();
        assert!(e.contains("max_position_embeddings (100)"), "{e}");
        assert!(longest_prompt(
            &c,
            &Workload::generate(Task::Causal, 2, 1, 100),
            &o,
            &mut |_| {}
        )
        .is_err());
        // llama's class default when the config has none
        let d = HfConfig::parse(r#"{"model_type":"llama"}"#).unwrap();
        assert_eq!(max_positions(&d).unwrap(), Some(2048));
    }
}
