//! Headless Chromium driven over the Chrome DevTools Protocol, for the tests that open generated pages.
//!
//! Debian's `chromium` at [`CHROMIUM`] (`.ci/run` installs it; nothing is downloaded at run time) is started
//! with a fresh profile and `--remote-debugging-port=0`; the port it picked is read from its stderr, and
//! one page target is driven through a flattened session: navigate, evaluate, click, press keys, capture
//! a screenshot. Every network request the page makes is recorded (`Network.requestWillBeSent`), and so is
//! every Content-Security-Policy violation (a listener installed before any script of the page runs), so a
//! test can assert that nothing was requested and nothing was blocked.
#![allow(dead_code)]

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use serde_json::{json, Value};
use std::io::{BufRead, BufReader};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;
use tungstenite::stream::MaybeTlsStream;
use tungstenite::{Message, WebSocket};

pub const CHROMIUM: &str = "/usr/bin/chromium";
/// Longest wait for Chromium to start, or for its next message.
const WAIT_MAX: Duration = Duration::from_secs(60);
/// Most messages read while waiting for one answer or event (the rest are events of other kinds); with the
/// socket's read timeout this bounds every wait without reading a clock.
const MESSAGES_PER_WAIT_MAX: usize = 100_000;

/// Installed before the page's own scripts: collects CSP violations where the test can read them.
const VIOLATION_LISTENER: &str = "window.__cspViolations = []; document.addEventListener('securitypolicyviolation', \
     function (e) { window.__cspViolations.push(e.violatedDirective + ' ' + e.blockedURI); });";

pub struct Browser {
    child: Child,
    socket: WebSocket<MaybeTlsStream<TcpStream>>,
    profile: PathBuf,
    next_id: u64,
    session: String,
    /// Events received so far (method and params), in order.
    pub events: Vec<(String, Value)>,
}

impl Browser {
    /// Starts Chromium, or panics saying what is missing: a test that needs it must fail, never pass.
    pub fn launch(name: &str) -> Browser {
        assert!(
            Path::new(CHROMIUM).exists(),
            "{CHROMIUM} is missing: install Debian's chromium (apt-get install -y chromium), as .ci/run does"
        );
        let profile = std::env::temp_dir().join(format!("mcpsim-chromium-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&profile);
        std::fs::create_dir_all(&profile).unwrap();
        let mut child = Command::new(CHROMIUM)
            .args([
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-quic",
                "--no-first-run",
                "--no-default-browser-check",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--disable-extensions",
                "--remote-debugging-address=127.0.0.1",
                "--remote-debugging-port=0",
            ])
            .arg(format!("--user-data-dir={}", profile.display()))
            .arg("about:blank")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("chromium starts");
        let stderr = child.stderr.take().unwrap();
        let (found, announced) = std::sync::mpsc::channel();
        // Keep reading stderr for the browser's whole life (a full pipe would stall it); send the address.
        std::thread::spawn(move || {
            let mut found = Some(found);
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if let Some(url) = line.strip_prefix("DevTools listening on ") {
                    if let Some(found) = found.take() {
                        let _ = found.send(url.trim().to_string());
                    }
                }
            }
        });
        let url = announced.recv_timeout(WAIT_MAX).expect("chromium announces its DevTools address on stderr");
        let (socket, _) = tungstenite::connect(url.as_str()).expect("the DevTools WebSocket accepts us");
        if let MaybeTlsStream::Plain(stream) = socket.get_ref() {
            stream.set_read_timeout(Some(WAIT_MAX)).unwrap();
        }
        let mut browser = Browser { child, socket, profile, next_id: 1, session: String::new(), events: Vec::new() };
        let target = browser.call("Target.createTarget", json!({ "url": "about:blank" }));
        let target_id = target["targetId"].as_str().unwrap().to_string();
        let attached = browser.call("Target.attachToTarget", json!({ "targetId": target_id, "flatten": true }));
        browser.session = attached["sessionId"].as_str().unwrap().to_string();
        for domain in ["Page.enable", "Network.enable", "Runtime.enable", "Log.enable"] {
            browser.call(domain, json!({}));
        }
        browser.call("Page.addScriptToEvaluateOnNewDocument", json!({ "source": VIOLATION_LISTENER }));
        browser
            .call("Emulation.setDeviceMetricsOverride", json!({ "width": 1500, "height": 1000, "deviceScaleFactor": 1, "mobile": false }));
        browser
    }

    /// Sends a command (to the page's session once attached) and waits for its answer.
    pub fn call(&mut self, method: &str, params: Value) -> Value {
        let id = self.next_id;
        self.next_id += 1;
        let mut command = json!({ "id": id, "method": method, "params": params });
        if !self.session.is_empty() {
            command["sessionId"] = json!(self.session);
        }
        self.socket.send(Message::text(command.to_string())).expect("the command is sent");
        for _ in 0..MESSAGES_PER_WAIT_MAX {
            let message = self.read();
            if message.get("id").and_then(Value::as_u64) == Some(id) {
                if let Some(error) = message.get("error") {
                    panic!("{method} failed: {error}");
                }
                return message["result"].clone();
            }
        }
        panic!("no answer to {method} in {MESSAGES_PER_WAIT_MAX} messages");
    }

    fn read(&mut self) -> Value {
        loop {
            match self.socket.read().expect("the DevTools WebSocket stays open") {
                Message::Text(text) => {
                    let message: Value = serde_json::from_str(text.as_str()).expect("DevTools sends JSON");
                    if let Some(method) = message.get("method").and_then(Value::as_str) {
                        self.events.push((method.to_string(), message["params"].clone()));
                    }
                    return message;
                }
                Message::Close(_) => panic!("the DevTools WebSocket closed"),
                _ => continue,
            }
        }
    }

    /// Opens a file and waits for its load event.
    pub fn open(&mut self, file: &Path) -> String {
        let url = format!("file://{}", file.canonicalize().expect("the page exists").display());
        let seen = self.events.len();
        self.call("Page.navigate", json!({ "url": url }));
        for _ in 0..MESSAGES_PER_WAIT_MAX {
            if self.events[seen..].iter().any(|(method, _)| method == "Page.loadEventFired") {
                return url;
            }
            self.read();
        }
        panic!("{url} did not load in {MESSAGES_PER_WAIT_MAX} messages");
    }

    /// Navigates to a URL (an `http://` page of a running server) and waits for its load event.
    pub fn navigate(&mut self, url: &str) {
        let seen = self.events.len();
        self.call("Page.navigate", json!({ "url": url }));
        self.wait_for_load(seen);
    }

    /// Waits for a load event after the first `seen` events (a click that submits a form navigates).
    pub fn wait_for_load(&mut self, seen: usize) {
        for _ in 0..MESSAGES_PER_WAIT_MAX {
            if self.events[seen.min(self.events.len())..].iter().any(|(method, _)| method == "Page.loadEventFired") {
                return;
            }
            self.read();
        }
        panic!("no page loaded in {MESSAGES_PER_WAIT_MAX} messages");
    }

    /// Evaluates a JavaScript expression in the page and returns its value (JSON).
    pub fn eval(&mut self, expression: &str) -> Value {
        let result = self.call("Runtime.evaluate", json!({ "expression": expression, "returnByValue": true, "awaitPromise": true }));
        if let Some(exception) = result.get("exceptionDetails") {
            panic!("{expression} threw: {exception}");
        }
        result["result"]["value"].clone()
    }

    /// Clicks the middle of the element with this id, as a mouse does (press and release).
    pub fn click(&mut self, id: &str) {
        let rect = self.eval(&format!(
            "(function () {{ var e = document.getElementById({id:?}); e.scrollIntoView({{block: 'center'}}); \
             var r = e.getBoundingClientRect(); return {{x: r.left + Math.min(r.width / 2, 200), y: r.top + r.height / 2}}; }})()"
        ));
        let (x, y) = (rect["x"].as_f64().unwrap(), rect["y"].as_f64().unwrap());
        for kind in ["mousePressed", "mouseReleased"] {
            self.call("Input.dispatchMouseEvent", json!({ "type": kind, "x": x, "y": y, "button": "left", "clickCount": 1 }));
        }
    }

    /// Presses a key: `j`, `k`, `s` (characters) or `Home`, `End`, `Escape`, `ArrowDown`.
    pub fn press(&mut self, key: &str) {
        let (code, virtual_key, text) = match key {
            "Home" => ("Home", 36, None),
            "End" => ("End", 35, None),
            "Escape" => ("Escape", 27, None),
            "ArrowDown" => ("ArrowDown", 40, None),
            "ArrowUp" => ("ArrowUp", 38, None),
            letter => {
                let upper = letter.to_ascii_uppercase();
                (if letter.len() == 1 { "" } else { letter }, upper.as_bytes()[0] as u32, Some(letter))
            }
        };
        let code = if code.is_empty() { format!("Key{}", key.to_ascii_uppercase()) } else { code.to_string() };
        let mut down = json!({ "type": "keyDown", "key": key, "code": code, "windowsVirtualKeyCode": virtual_key });
        if let Some(text) = text {
            down["text"] = json!(text);
        }
        self.call("Input.dispatchKeyEvent", down);
        self.call("Input.dispatchKeyEvent", json!({ "type": "keyUp", "key": key, "code": code, "windowsVirtualKeyCode": virtual_key }));
    }

    /// A PNG of the viewport, written to `path` (its folder is created).
    pub fn screenshot(&mut self, path: &Path, width: u32, height: u32) {
        self.call(
            "Emulation.setDeviceMetricsOverride",
            json!({ "width": width, "height": height, "deviceScaleFactor": 1, "mobile": false }),
        );
        let shot = self.call("Page.captureScreenshot", json!({ "format": "png" }));
        let bytes = STANDARD.decode(shot["data"].as_str().unwrap()).unwrap();
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, bytes).unwrap();
    }

    /// Every URL the page requested since it was opened (the document's own included).
    pub fn requests(&self) -> Vec<String> {
        self.events
            .iter()
            .filter(|(method, _)| method == "Network.requestWillBeSent")
            .filter_map(|(_, params)| params["request"]["url"].as_str().map(str::to_string))
            .collect()
    }

    /// Console errors, uncaught exceptions and browser log errors (a CSP refusal is logged there).
    pub fn errors(&self) -> Vec<String> {
        self.events
            .iter()
            .filter_map(|(method, params)| match method.as_str() {
                "Runtime.exceptionThrown" => Some(params["exceptionDetails"].to_string()),
                "Runtime.consoleAPICalled" if params["type"] == "error" => Some(params["args"].to_string()),
                "Log.entryAdded" if params["entry"]["level"] == "error" => Some(params["entry"]["text"].to_string()),
                _ => None,
            })
            .collect()
    }

    /// Forgets the events so far (before opening another page).
    pub fn clear(&mut self) {
        self.events.clear();
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.socket.close(None);
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.profile);
    }
}
