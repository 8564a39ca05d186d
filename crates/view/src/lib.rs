//! `vramscope view`: a snapshot explored in the browser, served by this
//! process on 127.0.0.1 only. The page (`view.html`, no network beyond its
//! own server) asks for what it draws: the report, any range of the trace
//! in full detail as the user zooms and pans, what is live at a clicked
//! entry, where a searched site or module allocates. Every answer is
//! computed by [`vramscope_report::explore::Explorer`]; this crate only
//! routes requests.
//!
//! | path | answer |
//! | --- | --- |
//! | `/` | the page |
//! | `/api/report` | the report, trace length, allocations, segments |
//! | `/api/range?from=A&to=B&points=P` | entries `A..B`: curve and bands |
//! | `/api/at?i=I` | live after entry `I`, by category and site |
//! | `/api/state?i=I` | the allocator's segments and blocks after entry `I` |
//! | `/api/search?q=TEXT` | allocations whose site or module contains `TEXT` |
#![deny(missing_docs)]

use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tiny_http::{Header, Request, Response, Server};
use vramscope_report::explore::Explorer;

/// The page, its stylesheet and common script those of `inspect --html`.
fn page() -> String {
    use vramscope_report::html::{fill, COMMON_JS, STYLE};
    fill(
        include_str!("view.html"),
        &[("/*__STYLE__*/", STYLE), ("/*__COMMON__*/", COMMON_JS)],
    )
}

/// A bound viewer: the server and the snapshot it answers for.
pub struct Viewer {
    server: Server,
    explorer: Explorer,
    port: u16,
    page: String,
}

impl Viewer {
    /// Listen on 127.0.0.1:`port` (0: any free port).
    pub fn bind(explorer: Explorer, port: u16) -> io::Result<Viewer> {
        let server = Server::http(("127.0.0.1", port)).map_err(io::Error::other)?;
        let port = server.server_addr().to_ip().map_or(port, |a| a.port());
        Ok(Viewer {
            server,
            explorer,
            port,
            page: page(),
        })
    }

    /// The page's address.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}/", self.port)
    }

    /// Answer requests until `stop` is set (checked every 100 ms).
    pub fn serve(mut self, stop: &AtomicBool) {
        while !stop.load(Ordering::Relaxed) {
            match self.server.recv_timeout(Duration::from_millis(100)) {
                Ok(Some(req)) => self.handle(req),
                Ok(None) => {}
                Err(_) => break,
            }
        }
    }

    /// Serve on a thread; returns the address and the flag that stops it.
    pub fn spawn(self) -> (String, Arc<AtomicBool>, std::thread::JoinHandle<()>) {
        let url = self.url();
        let stop = Arc::new(AtomicBool::new(false));
        let s = stop.clone();
        let h = std::thread::spawn(move || self.serve(&s));
        (url, stop, h)
    }

    fn handle(&mut self, req: Request) {
        let url = req.url().to_owned();
        let (path, query) = url.split_once('?').unwrap_or((&url, ""));
        let num = |k: &str, d: usize| -> usize {
            param(query, k).and_then(|v| v.parse().ok()).unwrap_or(d)
        };
        let (status, kind, body) = match path {
            "/" | "/index.html" => (200, "text/html; charset=utf-8", self.page.clone()),
            "/api/report" => (200, JSON, self.explorer.report_json().to_string()),
            "/api/range" => {
                let v = self.explorer.range_json(
                    num("from", 0),
                    num("to", usize::MAX),
                    num("points", 1000),
                );
                (200, JSON, v.to_string())
            }
            "/api/at" => (200, JSON, self.explorer.at_json(num("i", 0)).to_string()),
            "/api/state" => (200, JSON, self.explorer.state_json(num("i", 0)).to_string()),
            "/api/search" => {
                let q = param(query, "q").unwrap_or_default();
                (200, JSON, self.explorer.search_json(&q).to_string())
            }
            _ => (404, "text/plain", format!("no such page: {path}\n")),
        };
        let header = Header::from_bytes("Content-Type", kind).expect("a valid header");
        let resp = Response::from_string(body)
            .with_status_code(status)
            .with_header(header);
        // a browser that went away is no error of ours
        let _ = req.respond(resp);
    }
}

const JSON: &str = "application/json";

/// The value of `key` in a query string, percent-decoded (`+` is a space).
fn param(query: &str, key: &str) -> Option<String> {
    query.split('&').find_map(|kv| {
        let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
        (k == key).then(|| decode(v))
    })
}

/// Percent-decoding; malformed escapes are kept as they are.
fn decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'+' => out.push(b' '),
            b'%' => {
                let hex = |c: u8| (c as char).to_digit(16);
                match (
                    b.get(i + 1).and_then(|&c| hex(c)),
                    b.get(i + 2).and_then(|&c| hex(c)),
                ) {
                    (Some(h), Some(l)) => {
                        out.push((h * 16 + l) as u8);
                        i += 2;
                    }
                    _ => out.push(b'%'),
                }
            }
            c => out.push(c),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_parameters() {
        assert_eq!(
            param("a=1&q=mlp+fc%2Eweight", "q").as_deref(),
            Some("mlp fc.weight")
        );
        assert_eq!(param("a=1", "q"), None);
        assert_eq!(decode("%zz%4"), "%zz%4");
        assert_eq!(decode("%C3%A9"), "é");
    }
}
