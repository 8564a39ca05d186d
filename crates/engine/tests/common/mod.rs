//! The harness of the fixture tests (`ops`, `seeds`): a JSON-lines file of
//! steps measured on the H100, and one case's steps in the twin compared
//! with it, figure by figure.

/// The figures of a step, in this order.
pub const KEYS: [&str; 5] = [
    "allocated",
    "peak",
    "reserved",
    "peak_reserved",
    "requested",
];

/// One step as the twin ran it: its name and its figures (in [`KEYS`] order).
pub type Step = (String, [i64; 5]);

/// One measured step of the fixture.
struct Line {
    case: String,
    step: String,
    figures: [i64; 5],
}

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

/// One case compared with the fixture.
pub struct Diff {
    /// steps in the fixture
    pub steps: usize,
    /// steps with a differing figure, or missing from the twin
    pub bad: usize,
    /// one line per difference
    pub lines: Vec<String>,
}

/// A fixture file and the twin that runs its cases.
pub struct Fixture {
    /// the `.jsonl` file, one step a line
    pub path: &'static str,
    /// the twin's steps of a case, or why it could not run it
    pub run: fn(&str) -> Result<Vec<Step>, String>,
    /// the width of the case column in [`Fixture::summary`]
    pub width: usize,
}

impl Fixture {
    fn lines(&self) -> Vec<Line> {
        let text = std::fs::read_to_string(self.path)
            .unwrap_or_else(|e| panic!("reading {}: {e}", self.path));
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

    /// The fixture's cases, in its order.
    pub fn cases(&self) -> Vec<String> {
        let mut cases: Vec<String> = self.lines().into_iter().map(|l| l.case).collect();
        cases.dedup();
        cases
    }

    /// Compare one case.
    pub fn diff(&self, case: &str) -> Diff {
        let truth: Vec<Line> = self
            .lines()
            .into_iter()
            .filter(|l| l.case == case)
            .collect();
        assert!(!truth.is_empty(), "no fixture lines for {case}");
        let twin = match (self.run)(case) {
            Ok(t) => t,
            Err(e) => {
                return Diff {
                    steps: truth.len(),
                    bad: truth.len(),
                    lines: vec![format!("{case}: {e}")],
                }
            }
        };
        let mut lines = Vec::new();
        let mut bad = 0;
        if twin.len() != truth.len() {
            lines.push(format!(
                "{case}: {} steps in the fixture, {} in the twin",
                truth.len(),
                twin.len()
            ));
        }
        for (t, (step, got)) in truth.iter().zip(&twin) {
            assert_eq!(&t.step, step, "{case}: step order");
            let mut ok = true;
            for i in 0..5 {
                if t.figures[i] != got[i] {
                    ok = false;
                    lines.push(format!(
                        "{case} {}: {} truth {} twin {} (diff {})",
                        t.step,
                        KEYS[i],
                        t.figures[i],
                        got[i],
                        got[i] - t.figures[i]
                    ));
                }
            }
            if !ok {
                bad += 1;
            }
        }
        bad += truth.len().saturating_sub(twin.len());
        Diff {
            steps: truth.len(),
            bad,
            lines,
        }
    }

    /// Every figure of every step of `case` must equal the fixture's.
    pub fn check(&self, case: &str) {
        let d = self.diff(case);
        assert!(
            d.lines.is_empty(),
            "{case} differs from the H100:\n{}",
            d.lines.join("\n")
        );
    }

    /// Print each case's exact steps and differences, then the total
    /// (`TOTAL exact/steps steps exact`).
    pub fn summary(&self, cases: &[impl AsRef<str>]) {
        let (mut exact, mut total) = (0, 0);
        for case in cases {
            let case = case.as_ref();
            let d = self.diff(case);
            total += d.steps;
            exact += d.steps - d.bad;
            eprintln!(
                "{case:w$} {}/{} steps exact{}",
                d.steps - d.bad,
                d.steps,
                if d.lines.is_empty() {
                    String::new()
                } else {
                    format!("\n    {}", d.lines.join("\n    "))
                },
                w = self.width
            );
        }
        eprintln!("TOTAL {exact}/{total} steps exact");
    }
}

/// One `#[test]` per case, each calling `$check(case)`:
/// `case_tests!(check; name => "case", ...)`.
macro_rules! case_tests {
    ($check:path; $($name:ident => $case:expr),* $(,)?) => {
        $(
            #[test]
            fn $name() {
                $check($case);
            }
        )*
    };
}
pub(crate) use case_tests;
