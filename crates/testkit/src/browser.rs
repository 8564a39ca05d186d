//! Headless Chromium's `--dump-dom` with a wall-clock bound: a browser that
//! hangs (seen on the 2-core machines: every process idle, the page's
//! connections open, no output for minutes) is killed and run once more
//! with a fresh profile, so a hang costs minutes, never the whole suite.

use std::io::Read;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// How long one browser run may take: the self-tests finish in seconds.
pub const LIMIT: Duration = Duration::from_secs(120);

/// Run `make(profile)` (a Chromium command line that writes the DOM to
/// stdout, given its `--user-data-dir`) under [`LIMIT`], a second time with
/// another profile if the first is killed; the DOM, or a panic naming both
/// timeouts.
pub fn dump_dom(dir: &Path, make: impl Fn(&Path) -> Command) -> String {
    dump_dom_within(dir, LIMIT, make)
}

fn dump_dom_within(dir: &Path, limit: Duration, make: impl Fn(&Path) -> Command) -> String {
    for attempt in 0..2 {
        let profile = dir.join(format!("profile-{attempt}"));
        // its own process group, so that a kill takes its renderers too (they
        // hold the stdout pipe open)
        let mut child = make(&profile)
            .process_group(0)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("chromium runs");
        let mut stdout = child.stdout.take().expect("piped stdout");
        // read as the browser writes, so a large DOM never fills the pipe
        let reader = std::thread::spawn(move || {
            let mut out = Vec::new();
            let _ = stdout.read_to_end(&mut out);
            out
        });
        let start = Instant::now();
        let finished = loop {
            if child.try_wait().expect("chromium's status").is_some() {
                break true;
            }
            if start.elapsed() > limit {
                let group = format!("-{}", child.id());
                let _ = Command::new("kill").args(["-KILL", "--", &group]).status();
                let _ = child.kill();
                let _ = child.wait();
                break false;
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        let out = reader.join().expect("the reader thread");
        if finished {
            return String::from_utf8_lossy(&out).into_owned();
        }
        eprintln!(
            "chromium ran past {limit:?} (attempt {}): killed",
            attempt + 1
        );
    }
    panic!("chromium ran past {limit:?} twice: the page never finished");
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shell(script: &'static str) -> impl Fn(&Path) -> Command {
        move |_| {
            let mut c = Command::new("sh");
            c.args(["-c", script]);
            c
        }
    }

    #[test]
    fn a_browser_that_finishes_gives_its_output() {
        let out = dump_dom_within(Path::new("."), LIMIT, shell("echo '<div>ok</div>'"));
        assert_eq!(out, "<div>ok</div>\n");
    }

    #[test]
    #[should_panic(expected = "twice")]
    fn a_browser_that_hangs_with_a_child_holding_its_output_is_killed() {
        // the child keeps stdout open after its parent is gone: without the group's kill the
        // reader would wait out its sleep (20 minutes over both attempts)
        dump_dom_within(
            Path::new("."),
            Duration::from_millis(300),
            shell("sleep 600 & sleep 600"),
        );
    }
}
