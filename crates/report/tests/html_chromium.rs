//! The HTML report runs in a real browser: headless Chromium loads it with
//! `#selftest`, the page draws, hovers the peak and writes the result (and
//! any JS errors) into `<div id="selftest">`.

use std::path::{Path, PathBuf};
use std::process::Command;

const TRUTH: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../fixtures/seeds/snapshot_encoder_adamw_h100.pickle"
);

const PREDICTED: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../fixtures/predicted/gpt2_train_b1_s64.pickle"
);

/// Chromium, which the set-up path installs (`scripts/dev.sh`: Debian's
/// package `chromium`).
fn chromium() -> Option<PathBuf> {
    find_chromium()
}

fn find_chromium() -> Option<PathBuf> {
    [
        "/usr/bin/chromium",
        "/usr/bin/chromium-browser",
        "/usr/bin/google-chrome",
    ]
    .iter()
    .map(PathBuf::from)
    .find(|p| p.exists())
}

/// Chromium, or `None` (with a loud note) when it is missing outside CI;
/// in CI a missing browser fails the test.
fn browser() -> Option<PathBuf> {
    let bin = chromium();
    if bin.is_none() {
        if std::env::var_os("CI").is_some() {
            panic!("chromium not found and CI is set: the set-up path installs it (bash scripts/dev.sh setup)");
        }
        eprintln!("\n\n*** SKIPPED: chromium not found; the HTML pages were NOT tested in a browser (bash scripts/dev.sh setup installs it) ***\n\n");
    }
    bin
}

fn headless(bin: &Path, dir: &Path) -> Command {
    let mut c = Command::new(bin);
    c.args([
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
    ])
    .arg(format!("--user-data-dir={}", dir.join("profile").display()));
    c
}

/// Render `snapshot`'s report, load it in Chromium with `#selftest`, and
/// return the self-test line (`ok: drew N polygons; hover stack: ...`).
/// `None` when Chromium is missing outside CI.
fn selftest(snapshot: &str, title: &str, tag: &str) -> Option<String> {
    let bin = browser()?;
    let snap = vramscope_snapshot::read_snapshot_file(snapshot).unwrap();
    let (cfg, _) = vramscope_replay::from_snapshot::config(&snap);
    let mut report = vramscope_report::analyze(&snap, &cfg, &Default::default());
    report.snapshot = title.into();
    let page = vramscope_report::html::render_snapshot(&snap, &cfg, &report);
    assert!(
        !page.contains("http://") && !page.contains("https://"),
        "the page must not reach the network"
    );
    let dir = std::env::temp_dir().join(format!("vramscope-html-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("report.html");
    std::fs::write(&file, &page).unwrap();
    let dom = vramscope_testkit::browser::dump_dom(&dir, |profile| {
        let mut c = headless(&bin, profile);
        c.arg("--dump-dom")
            .arg(format!("file://{}#selftest", file.display()));
        c
    });
    let start = dom
        .find("<div id=\"selftest\">")
        .expect("selftest div in the DOM");
    let result =
        dom[start..dom[start..].find("</div>").map_or(dom.len(), |e| start + e)].to_string();
    eprintln!("{result}");
    assert!(
        result.contains("ok: drew "),
        "page self-test did not run: {result}"
    );
    assert!(result.contains("console errors: 0"), "{result}");
    let drew: usize = result["<div id=\"selftest\">ok: drew ".len()..]
        .split(' ')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    assert!(drew > 100, "{result}");
    // the screenshot, looked at: every category of the legend is drawn
    // in its colour (more than a swatch's worth of pixels)
    let png = dir.join("shot.png");
    let status = headless(&bin, &dir)
        .arg(format!("--screenshot={}", png.display()))
        .arg("--window-size=1400,900")
        .arg(format!("file://{}", file.display()))
        .output()
        .unwrap();
    assert!(status.status.success() && png.exists());
    let legend = legend_colours(&result);
    assert!(!legend.is_empty(), "{result}");
    let seen = pixels_of(&bin, &dir, &png, &legend);
    eprintln!("screenshot pixels by legend colour: {seen:?}");
    let drawn = seen.iter().filter(|(_, n)| *n > 400).count();
    assert!(
        drawn * 2 >= legend.len() && seen.iter().map(|s| s.1).sum::<usize>() > 20_000,
        "the screenshot does not show the legend's colours: {seen:?}"
    );
    let _ = std::fs::remove_dir_all(&dir);
    Some(result)
}

/// The legend's `category=colour` pairs the self-test line lists.
fn legend_colours(selftest: &str) -> Vec<(String, String)> {
    let start = selftest.find("legend: ").expect("legend in the self-test") + "legend: ".len();
    let end = selftest[start..]
        .find(';')
        .map_or(selftest.len(), |e| start + e);
    selftest[start..end]
        .split(' ')
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
}

/// How many pixels of `png` have each colour (within 3 of each channel):
/// Chromium itself reads the screenshot (a page that draws it on a canvas,
/// file access allowed so that the canvas can be read).
fn pixels_of(
    bin: &Path,
    dir: &Path,
    png: &Path,
    colours: &[(String, String)],
) -> Vec<(String, usize)> {
    let list: Vec<String> = colours.iter().map(|(_, c)| format!("{c:?}")).collect();
    let page = format!(
        r#"<!DOCTYPE html><html><body><div id="out">pending</div><script>
var colours = [{}];
var img = new Image();
img.onload = function () {{
  var c = document.createElement("canvas"); c.width = img.width; c.height = img.height;
  var x = c.getContext("2d"); x.drawImage(img, 0, 0);
  var d = x.getImageData(0, 0, c.width, c.height).data;
  var probe = document.createElement("canvas").getContext("2d");
  document.getElementById("out").textContent = colours.map(function (col) {{
    probe.fillStyle = col; probe.fillRect(0, 0, 1, 1);
    var p = probe.getImageData(0, 0, 1, 1).data, n = 0;
    for (var i = 0; i < d.length; i += 4)
      if (Math.abs(d[i] - p[0]) < 4 && Math.abs(d[i + 1] - p[1]) < 4 && Math.abs(d[i + 2] - p[2]) < 4) n++;
    return n;
  }}).join(" ");
}};
img.onerror = function () {{ document.getElementById("out").textContent = "cannot load the screenshot"; }};
img.src = {:?};
</script></body></html>"#,
        list.join(", "),
        png.file_name().unwrap().to_string_lossy()
    );
    let checker = dir.join("look.html");
    std::fs::write(&checker, page).unwrap();
    let dom = vramscope_testkit::browser::dump_dom(dir, |profile| {
        let mut c = headless(bin, profile);
        c.arg("--allow-file-access-from-files")
            .arg("--virtual-time-budget=10000")
            .arg("--dump-dom")
            .arg(format!("file://{}", checker.display()));
        c
    });
    let start =
        dom.find("<div id=\"out\">").expect("the checker's output") + "<div id=\"out\">".len();
    let text = &dom[start..start + dom[start..].find('<').unwrap_or(0)];
    let counts: Vec<usize> = text
        .split(' ')
        .map(|n| {
            n.parse()
                .unwrap_or_else(|_| panic!("the checker said {text:?}"))
        })
        .collect();
    colours.iter().map(|(k, _)| k.clone()).zip(counts).collect()
}

#[test]
fn html_report_draws_and_hovers_in_chromium() {
    if let Some(result) = selftest(TRUTH, "snapshot_encoder_adamw_h100.pickle", "truth") {
        assert!(result.contains("hover stack: 64.00 MiB"), "{result}");
        // the user's own frame first, not the allocator's internals
        assert!(
            result.contains("| your code: |   /home/user/probe_dir/seeds_probe.py:111 in"),
            "{result}"
        );
        assert!(!result.contains("torch::unwind"), "{result}");
        // zoomed on ten entries around the peak: fewer bands, the range said
        assert!(
            result.contains("in showing entries 411 to 421 of 897"),
            "{result}"
        );
        let zoom = &result[result.find("zoom: ").unwrap() + 6..];
        let shown: usize = zoom.split(' ').next().unwrap().parse().unwrap();
        assert!(shown > 0 && shown < 319, "{result}");
        // a legend of every category drawn; segment labels never overlap
        assert!(result.contains("legend: parameters=hsl("), "{result}");
        assert!(
            result.contains("segment labels: 21, overlapping: 0"),
            "{result}"
        );
        // a time axis in seconds (most of this run's time passes between
        // two entries: the ticks there share one label)
        assert!(
            result.contains("time axis: 2 ticks, 0.0 s | 6.0 s;"),
            "{result}"
        );
    }
}

/// The report of a run predicted by `vramscope estimate --snapshot`
/// (`fixtures/predicted`): at its peak, hovering finds the largest block,
/// GPT-2's tied token embedding (50257 x 768 fp32 = 147.24 MiB, a 148 MiB
/// block), with the category the eager twin gave it.
#[test]
fn predicted_report_draws_and_hovers_in_chromium() {
    if let Some(result) = selftest(
        PREDICTED,
        "predicted: gpt2 train batch 1 seq 64",
        "predicted",
    ) {
        assert!(
            result.contains("hover stack: 148.00 MiB (parameters: predicted by vramscope estimate"),
            "{result}"
        );
        let axis = &result[result.find("time axis: ").unwrap() + 11..];
        let ticks: usize = axis.split(' ').next().unwrap().parse().unwrap();
        assert!(ticks >= 3 && axis.contains(" s | "), "{result}");
    }
}

/// The sweep plot (`vramscope plan --batch LIST --html FILE`) parses and
/// draws in Chromium: every point is in the DOM Chromium built, and the
/// screenshot is not blank.
#[test]
fn sweep_plot_draws_in_chromium() {
    let Some(bin) = browser() else {
        return;
    };
    use vramscope_report::sweep::{render_sweep, SweepPoint};
    let points: Vec<SweepPoint> = (1..=32)
        .flat_map(|b| {
            [512i64, 2048].map(|s| SweepPoint {
                batch: b,
                seq: s,
                peak_reserved_bytes: 2_000_000_000 + b * s * 400_000,
                fits: b * s <= 16384,
            })
        })
        .collect();
    let page = render_sweep("sweep", 8_000_000_000, &points);
    let dir = std::env::temp_dir().join(format!("vramscope-sweep-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("sweep.html");
    std::fs::write(&file, &page).unwrap();
    let dom = vramscope_testkit::browser::dump_dom(&dir, |profile| {
        let mut c = headless(&bin, profile);
        c.arg("--dump-dom")
            .arg(format!("file://{}", file.display()));
        c
    });
    assert_eq!(
        dom.matches("<circle").count(),
        64,
        "{}",
        &dom[..dom.len().min(500)]
    );
    assert_eq!(dom.matches("<polyline").count(), 2);
    let png = dir.join("shot.png");
    let status = headless(&bin, &dir)
        .arg(format!("--screenshot={}", png.display()))
        .arg("--window-size=1000,800")
        .arg(format!("file://{}", file.display()))
        .output()
        .unwrap();
    assert!(status.status.success() && png.metadata().map(|m| m.len() > 10_000).unwrap_or(false));
    let _ = std::fs::remove_dir_all(&dir);
}
