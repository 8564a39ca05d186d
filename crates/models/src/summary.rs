//! What an [`Estimate`] found, folded for a person to read at a glance.
//!
//! A transformer repeats one block per layer, so the live memory at the peak
//! by module path is the same few names dozens of times over
//! (`model.layers.0.input_layernorm` ... `model.layers.35.input_layernorm`):
//! a list of the ten heaviest paths shows ten copies of one thing. Folding
//! the layer index (a path component that is a number) shows each kind of
//! module once, with how many there are and what they hold together.

use std::collections::HashMap;

use vramscope_engine::Category;

use crate::estimate::Estimate;

/// Module paths that differ only in their numeric components, folded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModuleGroup {
    /// the path with each numeric component written `*`
    /// (`model.layers.*.mlp`); `""` is the top level
    pub path: String,
    /// how many module paths it folds
    pub count: usize,
    /// what they hold together (bytes requested)
    pub bytes: u64,
}

/// `path` with every component that is a number written `*`.
fn folded(path: &str) -> String {
    path.split('.')
        .map(|c| {
            if !c.is_empty() && c.bytes().all(|b| b.is_ascii_digit()) {
                "*"
            } else {
                c
            }
        })
        .collect::<Vec<_>>()
        .join(".")
}

/// `by_module` (path, bytes) folded by `folded` path, the heaviest first
/// (equal ones by path).
pub fn group_repeated(by_module: &[(String, u64)]) -> Vec<ModuleGroup> {
    let mut groups: HashMap<String, ModuleGroup> = HashMap::new();
    for (path, bytes) in by_module {
        let key = folded(path);
        let g = groups.entry(key.clone()).or_insert(ModuleGroup {
            path: key,
            count: 0,
            bytes: 0,
        });
        g.count += 1;
        g.bytes += bytes;
    }
    let mut out: Vec<ModuleGroup> = groups.into_values().collect();
    out.sort_by(|a, b| b.bytes.cmp(&a.bytes).then_with(|| a.path.cmp(&b.path)));
    out
}

impl Estimate {
    /// The heaviest modules at the peak, repeated layers folded
    /// ([`group_repeated`] of [`Estimate::by_module_at_peak`]).
    pub fn module_groups_at_peak(&self) -> Vec<ModuleGroup> {
        group_repeated(&self.by_module_at_peak)
    }

    /// What the top level holds at the peak (allocations made while no
    /// submodule ran: loading, the root module's own ops, backward, the
    /// optimizer), by category, the largest first.
    pub fn top_level_at_peak(&self) -> Vec<(Category, u64)> {
        let mut out: Vec<(Category, u64)> = Vec::new();
        for r in self.live_at_peak.iter().filter(|r| r.module.is_empty()) {
            match out.iter_mut().find(|(c, _)| *c == r.category) {
                Some(e) => e.1 += r.bytes,
                None => out.push((r.category, r.bytes)),
            }
        }
        out.sort_by(|a, b| {
            b.1.cmp(&a.1)
                .then_with(|| a.0.to_string().cmp(&b.0.to_string()))
        });
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn flat(list: &[(&str, u64)]) -> Vec<(String, u64)> {
        list.iter().map(|(p, b)| (p.to_string(), *b)).collect()
    }

    #[test]
    fn layers_fold_into_one_line_each() {
        let g = group_repeated(&flat(&[
            ("", 100),
            ("model.layers.0.mlp", 30),
            ("model.layers.1.mlp", 30),
            ("model.layers.10.mlp", 20),
            ("model.layers.0.input_layernorm", 5),
            ("model.layers.1.input_layernorm", 5),
            ("model.norm", 7),
            ("lm_head", 7),
        ]));
        let got: Vec<(&str, usize, u64)> = g
            .iter()
            .map(|g| (g.path.as_str(), g.count, g.bytes))
            .collect();
        assert_eq!(
            got,
            [
                ("", 1, 100),
                ("model.layers.*.mlp", 3, 80),
                ("model.layers.*.input_layernorm", 2, 10),
                ("lm_head", 1, 7),
                ("model.norm", 1, 7),
            ]
        );
    }

    #[test]
    fn only_whole_numeric_components_fold() {
        assert_eq!(
            folded("encoder.layer.11.attention"),
            "encoder.layer.*.attention"
        );
        assert_eq!(folded("h.3.attn.c_attn"), "h.*.attn.c_attn");
        assert_eq!(folded("blocks.layer2.conv1"), "blocks.layer2.conv1");
        assert_eq!(folded(""), "");
        assert_eq!(folded("a..b"), "a..b");
    }

    #[test]
    fn folding_keeps_every_byte() {
        let list = flat(&[("x.0.y", 3), ("x.1.y", 4), ("x.1.z", 5), ("", 6)]);
        let total: u64 = group_repeated(&list).iter().map(|g| g.bytes).sum();
        assert_eq!(total, 18);
        let count: usize = group_repeated(&list).iter().map(|g| g.count).sum();
        assert_eq!(count, 4);
    }
}
