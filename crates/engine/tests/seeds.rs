//! The seed experiments measured on an H100 (`shared/truth/seeds_h100.jsonl`)
//! against the twin: every figure of every step must be equal.

use vramscope_engine::demo;

const FIXTURE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../../shared/truth/seeds_h100.jsonl"
);

#[derive(Debug, Clone, PartialEq, Eq)]
struct Line {
    case: String,
    step: String,
    figures: [i64; 5],
}

const KEYS: [&str; 5] = [
    "allocated",
    "peak",
    "reserved",
    "peak_reserved",
    "requested",
];

fn field<'a>(line: &'a str, key: &str) -> Option<&'a str> {
    let pat = format!("\"{key}\":");
    let i = line.find(&pat)? + pat.len();
    let rest = line[i..].trim_start();
    if let Some(r) = rest.strip_prefix('"') {
        Some(&r[..r.find('"')?])
    } else {
        let end = rest.find([',', '}']).unwrap_or(rest.len());
        Some(rest[..end].trim())
    }
}

fn fixture() -> Vec<Line> {
    let text =
        std::fs::read_to_string(FIXTURE).unwrap_or_else(|e| panic!("reading {FIXTURE}: {e}"));
    text.lines()
        .filter_map(|l| {
            let case = field(l, "case")?.to_string();
            let step = field(l, "step")?.to_string();
            let mut figures = [0i64; 5];
            for (k, f) in KEYS.iter().zip(figures.iter_mut()) {
                *f = field(l, k)?.parse().ok()?;
            }
            Some(Line {
                case,
                step,
                figures,
            })
        })
        .collect()
}

/// Compare one case; returns the list of differing (step, key, truth, twin).
fn diff_case(case: &str) -> Vec<String> {
    let truth: Vec<Line> = fixture().into_iter().filter(|l| l.case == case).collect();
    assert!(!truth.is_empty(), "no fixture lines for {case}");
    let twin = demo::run(case).unwrap_or_else(|e| panic!("{case}: {e}"));
    let mut diffs = Vec::new();
    if twin.len() != truth.len() {
        diffs.push(format!(
            "{case}: {} steps in the fixture, {} in the twin",
            truth.len(),
            twin.len()
        ));
    }
    for (t, s) in truth.iter().zip(&twin) {
        assert_eq!(t.step, s.step, "{case}: step order");
        let got = [
            s.allocated,
            s.peak,
            s.reserved,
            s.peak_reserved,
            s.requested,
        ];
        for i in 0..5 {
            if t.figures[i] != got[i] {
                diffs.push(format!(
                    "{case} {}: {} truth {} twin {} (diff {})",
                    t.step,
                    KEYS[i],
                    t.figures[i],
                    got[i],
                    got[i] - t.figures[i]
                ));
            }
        }
    }
    diffs
}

fn check(case: &str) {
    let d = diff_case(case);
    assert!(
        d.is_empty(),
        "{case} differs from the H100:\n{}",
        d.join("\n")
    );
}

#[test]
fn every_fixture_case_is_a_demo_case() {
    let mut cases: Vec<String> = fixture().into_iter().map(|l| l.case).collect();
    cases.dedup();
    let demo: Vec<String> = demo::cases().into_iter().map(String::from).collect();
    assert_eq!(cases, demo);
}

#[test]
fn summary() {
    let mut exact = 0;
    let mut total = 0;
    for case in demo::cases() {
        let n = fixture().iter().filter(|l| l.case == case).count();
        let d = diff_case(case);
        total += n;
        let bad_steps: std::collections::BTreeSet<String> = d
            .iter()
            .filter_map(|l| l.split(' ').nth(1).map(String::from))
            .collect();
        exact += n - bad_steps.len().min(n);
        eprintln!(
            "{case:28} {}/{} steps exact{}",
            n - bad_steps.len().min(n),
            n,
            if d.is_empty() {
                String::new()
            } else {
                format!("\n    {}", d.join("\n    "))
            }
        );
    }
    eprintln!("TOTAL {exact}/{total} steps exact");
}

macro_rules! seed_test {
    ($name:ident, $case:expr) => {
        #[test]
        fn $name() {
            check($case);
        }
    };
}

seed_test!(seed000_nograd, "seed000:nograd");
seed_test!(seed000_both, "seed000:both");
seed_test!(seed000_xonly, "seed000:xonly");
seed_test!(seed000_fused, "seed000:fused");
seed_test!(seed000_fused2, "seed000:fused2");
seed_test!(seed000_sigmoid_manual, "seed000:sigmoid_manual");
seed_test!(seed000_sigmoid_builtin, "seed000:sigmoid_builtin");
seed_test!(seed001, "seed001");
seed_test!(seed001b, "seed001b");
seed_test!(seed002, "seed002");
seed_test!(seed003, "seed003");
seed_test!(seed003b, "seed003b");
seed_test!(snapshot, "snapshot");
