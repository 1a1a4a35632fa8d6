//! Real headless Chromium (Debian's `chromium`; scripts/test installs it) for the tests of
//! ipaudit's HTML: a page's DOM as the browser built it, a screenshot, and readers of the
//! serialized DOM. `IPAUDIT_CHROMIUM` names another browser binary.

use std::collections::HashMap;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// The browser window, and so the screenshot's size.
pub const WINDOW: (u32, u32) = (1400, 1000);
/// A browser that has not finished a page by then is stuck.
const BROWSER_DEADLINE: Duration = Duration::from_secs(120);

/// The `file://` URL of a page on disk.
pub fn file_url(page: &Path) -> String {
    format!("file://{}", page.display())
}

/// The browser binary: `IPAUDIT_CHROMIUM`, else `chromium` on the PATH.
pub fn chromium() -> String {
    std::env::var("IPAUDIT_CHROMIUM").unwrap_or_else(|_| "chromium".to_owned())
}

/// Runs headless Chromium on the page with `args`; a private profile per run so that
/// parallel tests do not share one, and a deadline so a stuck browser fails the test.
pub fn headless(url: &str, args: &[String]) -> Output {
    let profile = tempfile::tempdir().expect("browser profile dir");
    let mut child = Command::new(chromium())
        .args([
            "--headless",
            // The tests run as root in CI containers, where Chromium's sandbox cannot start;
            // the page is the test's own file.
            "--no-sandbox",
            "--disable-gpu",
            "--hide-scrollbars",
            "--no-first-run",
        ])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .args(args)
        .arg(url)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| {
            panic!(
                "cannot run {} ({e}): install Debian's chromium (scripts/test does)",
                chromium()
            )
        });
    let started = Instant::now();
    // Read stdout on a thread: a large DOM fills the pipe before the browser exits.
    let stdout = child.stdout.take().expect("stdout piped");
    let reader = std::thread::spawn(move || {
        let mut stdout = stdout;
        let mut bytes = Vec::new();
        std::io::Read::read_to_end(&mut stdout, &mut bytes).map(|_| bytes)
    });
    loop {
        if child.try_wait().expect("wait for chromium").is_some() {
            break;
        }
        if started.elapsed() > BROWSER_DEADLINE {
            let _ = child.kill();
            panic!("chromium did not finish {url} within {BROWSER_DEADLINE:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let status = child.wait().expect("chromium exit status");
    let mut stderr = String::new();
    if let Some(mut err) = child.stderr.take() {
        let _ = std::io::Read::read_to_string(&mut err, &mut stderr);
    }
    let stdout = reader
        .join()
        .expect("reader thread")
        .expect("read chromium stdout");
    assert!(status.success(), "chromium failed ({status}): {stderr}");
    Output {
        status,
        stdout,
        stderr: stderr.into_bytes(),
    }
}

/// The page's DOM after Chromium parsed and laid it out.
pub fn dump_dom(url: &str) -> String {
    let out = headless(url, &["--dump-dom".to_owned()]);
    String::from_utf8(out.stdout).expect("DOM is UTF-8")
}

/// A screenshot of the page's first screenful, decoded: (width, height, RGB pixels).
pub fn screenshot(url: &str, png_path: &Path) -> (u32, u32, Vec<[u8; 3]>) {
    headless(
        url,
        &[
            format!("--screenshot={}", png_path.display()),
            format!("--window-size={},{}", WINDOW.0, WINDOW.1),
        ],
    );
    let file = std::fs::File::open(png_path).expect("chromium wrote the screenshot");
    let mut reader = png::Decoder::new(std::io::BufReader::new(file))
        .read_info()
        .expect("the screenshot is a PNG");
    let mut buf = vec![0; reader.output_buffer_size().expect("buffer size")];
    let info = reader.next_frame(&mut buf).expect("PNG frame");
    let channels = info.color_type.samples();
    assert_eq!(info.bit_depth, png::BitDepth::Eight);
    let pixels = buf[..info.buffer_size()]
        .chunks_exact(channels)
        .map(|p| [p[0], p[1], p[2]])
        .collect();
    (info.width, info.height, pixels)
}

/// The attributes of every `<tag ...>` start tag in a serialized DOM, unescaped.
/// (Chromium writes every attribute as `name="value"`.)
pub fn elements(dom: &str, tag: &str) -> Vec<HashMap<String, String>> {
    let open = format!("<{tag} ");
    dom.match_indices(&open)
        .map(|(at, _)| {
            let rest = &dom[at + open.len()..];
            attributes(&rest[..tag_end(rest)])
        })
        .collect()
}

/// Where a start tag ends: the first `>` outside an attribute value.
fn tag_end(text: &str) -> usize {
    let mut quoted = false;
    for (i, c) in text.char_indices() {
        match c {
            '"' => quoted = !quoted,
            '>' if !quoted => return i,
            _ => {}
        }
    }
    text.len()
}

fn attributes(mut text: &str) -> HashMap<String, String> {
    let mut attrs = HashMap::new();
    loop {
        text = text.trim_start();
        let Some(eq) = text.find("=\"") else { break };
        let name = text[..eq].trim().to_owned();
        let value_start = eq + 2;
        let Some(len) = text[value_start..].find('"') else {
            break;
        };
        attrs.insert(name, unescape(&text[value_start..value_start + len]));
        text = &text[value_start + len + 1..];
    }
    attrs
}

/// Text with the entities Chromium writes in attributes decoded.
pub fn unescape(text: &str) -> String {
    text.replace("&quot;", "\"")
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&nbsp;", "\u{a0}")
        .replace("&amp;", "&")
}

/// Every start tag in a serialized DOM: (tag name, attributes).
pub fn tags(dom: &str) -> Vec<(String, HashMap<String, String>)> {
    dom.match_indices('<')
        .filter_map(|(at, _)| {
            let rest = &dom[at + 1..];
            let name_len = rest
                .find(|c: char| !c.is_ascii_alphanumeric() && c != '-')
                .unwrap_or(rest.len());
            if name_len == 0 || !rest.starts_with(|c: char| c.is_ascii_alphabetic()) {
                return None;
            }
            let end = tag_end(rest);
            Some((
                rest[..name_len].to_ascii_lowercase(),
                attributes(&rest[name_len..end]),
            ))
        })
        .collect()
}

/// The `(object, kind, rv)` of every mark drawn, left to right (by the x of its
/// `translate(x,y)`).
pub fn marks(dom: &str) -> Vec<(String, String, String)> {
    let mut marks: Vec<(f64, (String, String, String))> = elements(dom, "g")
        .into_iter()
        .filter(|a| a.contains_key("data-kind"))
        .map(|a| {
            let x = a["transform"]
                .trim_start_matches("translate(")
                .split(',')
                .next()
                .and_then(|x| x.parse().ok())
                .expect("a mark is placed with translate(x,y)");
            let mark = (
                a["data-object"].clone(),
                a["data-kind"].clone(),
                a["data-rv"].clone(),
            );
            (x, mark)
        })
        .collect();
    marks.sort_by(|a, b| a.0.total_cmp(&b.0));
    marks.into_iter().map(|(_, m)| m).collect()
}

/// The `data-lane` of every lane drawn (the SVG groups; the labels carry the same).
pub fn lanes(dom: &str) -> Vec<String> {
    elements(dom, "g")
        .into_iter()
        .filter_map(|a| a.get("data-lane").cloned())
        .collect()
}
