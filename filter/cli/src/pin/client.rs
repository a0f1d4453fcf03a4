//! A minimal MCP client over Streamable HTTP, for `mcp-access pin`: `initialize`,
//! `notifications/initialized`, then `tools/list` page by page, answers read as JSON or as an
//! SSE stream; the caller's headers, bearer token and client certificate go with every request.

use std::io::{BufRead, BufReader, Read};
use std::path::PathBuf;
use std::time::Duration;

use serde_json::value::RawValue;
use serde_json::{json, Value};
use ureq::tls::{ClientCert, PemItem, RootCerts, TlsConfig};

use crate::error::CliError;

/// Largest answer read (one JSON body, or one SSE event).
const MAX_ANSWER: u64 = 64 * 1024 * 1024;

/// Most pages of `tools/list` followed.
const MAX_PAGES: usize = 1000;

/// How to reach the server.
#[derive(Debug, Clone, Default)]
pub struct Connection {
    pub url: String,
    /// Extra request headers (`Name: value`).
    pub headers: Vec<(String, String)>,
    pub bearer: Option<String>,
    /// Client certificate chain and key (PEM) for mTLS.
    pub client_cert: Option<(PathBuf, PathBuf)>,
    /// CA certificates (PEM) the server's certificate must chain to (default: the web PKI).
    pub ca: Option<PathBuf>,
    pub protocol_version: String,
    pub timeout: Duration,
}

/// One session with the server.
pub(crate) struct Client {
    agent: ureq::Agent,
    c: Connection,
    session: Option<String>,
    /// The revision the server answered `initialize` with.
    pub(crate) version: String,
    pub(crate) server: String,
    next_id: u64,
    /// `initialize` was answered: later requests name the revision.
    initialized: bool,
}

fn read_pem(path: &PathBuf) -> Result<Vec<PemItem<'static>>, CliError> {
    let bytes = std::fs::read(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let items: Result<Vec<_>, _> = ureq::tls::parse_pem(&bytes).collect();
    let items = items.map_err(|e| format!("{}: not PEM: {e}", path.display()))?;
    if items.is_empty() {
        return Err(format!("{}: no PEM item", path.display()).into());
    }
    Ok(items)
}

/// The certificates of a PEM file (at least one).
fn certificates(path: &PathBuf) -> Result<Vec<ureq::tls::Certificate<'static>>, CliError> {
    let certs: Vec<_> = read_pem(path)?
        .into_iter()
        .filter_map(|i| match i {
            PemItem::Certificate(c) => Some(c),
            _ => None,
        })
        .collect();
    if certs.is_empty() {
        return Err(format!("{}: no certificate", path.display()).into());
    }
    Ok(certs)
}

fn tls(c: &Connection) -> Result<TlsConfig, CliError> {
    let mut b = TlsConfig::builder();
    if let Some(ca) = &c.ca {
        b = b.root_certs(RootCerts::new_with_certs(&certificates(ca)?));
    }
    if let Some((cert, key)) = &c.client_cert {
        let chain = certificates(cert)?;
        let key = read_pem(key)?
            .into_iter()
            .find_map(|i| match i {
                PemItem::PrivateKey(k) => Some(k),
                _ => None,
            })
            .ok_or_else(|| format!("{}: no private key", key.display()))?;
        b = b.client_cert(Some(ClientCert::new_with_certs(&chain, key)));
    }
    Ok(b.build())
}

/// An answer's JSON-RPC message (its text) and the response headers that matter.
struct Answer {
    text: String,
    session: Option<String>,
}

impl Client {
    /// Connects: `initialize` and `notifications/initialized`.
    pub(crate) fn connect(c: Connection) -> Result<Client, CliError> {
        let config = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .max_redirects(0)
            .timeout_global(Some(c.timeout))
            .tls_config(tls(&c)?)
            .build();
        let mut client = Client {
            agent: config.into(),
            version: c.protocol_version.clone(),
            c,
            session: None,
            server: String::new(),
            next_id: 0,
            initialized: false,
        };
        let init = json!({"protocolVersion": client.c.protocol_version, "capabilities": {},
            "clientInfo": {"name": "mcp-access-pin", "version": env!("CARGO_PKG_VERSION")}});
        let answer = client.request("initialize", init)?;
        let result: Value = result_of(&answer.text, "initialize")?;
        client.session = answer.session;
        client.initialized = true;
        let version = result.get("protocolVersion").and_then(Value::as_str);
        client.version = version.unwrap_or(&client.c.protocol_version).to_string();
        let info = result.get("serverInfo");
        let name = info.and_then(|i| i.get("name")).and_then(Value::as_str);
        let v = info.and_then(|i| i.get("version")).and_then(Value::as_str);
        client.server = format!("{} {}", name.unwrap_or("?"), v.unwrap_or(""))
            .trim()
            .into();
        let note = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
        client.send(&note, false)?;
        Ok(client)
    }

    /// Every tool the server lists (all pages), each as the server wrote it.
    pub(crate) fn list_tools(&mut self) -> Result<Vec<Box<RawValue>>, CliError> {
        let mut tools = Vec::new();
        let mut cursors = std::collections::HashSet::new();
        let mut cursor: Option<String> = None;
        for _ in 0..MAX_PAGES {
            let params = match &cursor {
                Some(c) => json!({"cursor": c}),
                None => json!({}),
            };
            let answer = self.request("tools/list", params)?;
            let page = super::Page::read(&answer.text)?;
            tools.extend(page.tools);
            match page.next_cursor {
                Some(next) if !cursors.insert(next.clone()) => {
                    return Err(format!("tools/list: the server repeated cursor {next:?}").into());
                }
                Some(next) => cursor = Some(next),
                None => return Ok(tools),
            }
        }
        Err(format!("tools/list: more than {MAX_PAGES} pages").into())
    }

    /// Ends the session (best effort).
    pub(crate) fn close(self) {
        if let Some(s) = &self.session {
            let req = self.with_headers(self.agent.delete(&self.c.url));
            let _ = req.header("mcp-session-id", s).call();
        }
    }

    fn with_headers<B>(&self, mut req: ureq::RequestBuilder<B>) -> ureq::RequestBuilder<B> {
        for (n, v) in &self.c.headers {
            req = req.header(n, v);
        }
        if let Some(t) = &self.c.bearer {
            req = req.header("authorization", format!("Bearer {t}"));
        }
        if let Some(s) = &self.session {
            req = req.header("mcp-session-id", s);
        }
        if self.initialized {
            req = req.header("mcp-protocol-version", &self.version);
        }
        req
    }

    /// A request; its answer.
    fn request(&mut self, method: &str, params: Value) -> Result<Answer, CliError> {
        self.next_id += 1;
        let message =
            json!({"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params});
        self.send(&message, true)?
            .ok_or_else(|| CliError::invalid(format!("{method}: the server sent no answer")))
    }

    /// POSTs a message; with `answered`, reads the answer to it (a JSON body, or the response
    /// with its id on an SSE stream).
    fn send(&mut self, message: &Value, answered: bool) -> Result<Option<Answer>, CliError> {
        let method = message["method"].as_str().unwrap_or_default().to_string();
        let req = self
            .with_headers(self.agent.post(&self.c.url))
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream");
        let mut resp = req
            .send(message.to_string())
            .map_err(|e| format!("{method}: {}: {e}", self.c.url))?;
        let status = resp.status().as_u16();
        let header = |n: &str| {
            resp.headers()
                .get(n)
                .and_then(|v| v.to_str().ok())
                .map(str::to_string)
        };
        let session = header("mcp-session-id");
        let content_type = header("content-type").unwrap_or_default();
        let body = resp.body_mut().with_config().limit(MAX_ANSWER).reader();
        if !(200..300).contains(&status) {
            let mut text = String::new();
            let _ = body.take(2048).read_to_string(&mut text);
            return Err(format!(
                "{method}: HTTP {status} from {}: {}",
                self.c.url,
                text.trim()
            )
            .into());
        }
        if !answered {
            return Ok(None);
        }
        let essence = content_type
            .split(';')
            .next()
            .unwrap_or_default()
            .trim()
            .to_ascii_lowercase();
        let text = match essence.as_str() {
            "application/json" => {
                let mut text = String::new();
                BufReader::new(body)
                    .read_to_string(&mut text)
                    .map_err(|e| format!("{method}: reading the answer: {e}"))?;
                text
            }
            "text/event-stream" => {
                answer_on_stream(body, &message["id"]).map_err(|e| format!("{method}: {e}"))?
            }
            other => {
                return Err(
                    format!("{method}: the server answered with Content-Type {other:?}").into(),
                )
            }
        };
        Ok(Some(Answer { text, session }))
    }
}

/// The data of the first `message` event on an SSE stream that is the response with `id`.
fn answer_on_stream(body: impl Read, id: &Value) -> Result<String, CliError> {
    let mut reader = BufReader::new(body);
    let (mut data, mut event): (Vec<String>, Option<String>) = (Vec::new(), None);
    let mut line = Vec::new();
    loop {
        line.clear();
        let n = reader
            .read_until(b'\n', &mut line)
            .map_err(|e| format!("reading the event stream: {e}"))?;
        if n == 0 {
            return Err("the event stream ended without the answer".into());
        }
        let text = String::from_utf8_lossy(&line);
        let text = text.trim_end_matches(['\n', '\r']);
        if text.is_empty() {
            let joined = data.join("\n");
            let is_message = event
                .as_deref()
                .is_none_or(|e| e.is_empty() || e == "message");
            if is_message && !joined.is_empty() {
                let v: Value = serde_json::from_str(&joined)
                    .map_err(|e| format!("an event is not JSON: {e}"))?;
                if v.get("id") == Some(id)
                    && (v.get("result").is_some() || v.get("error").is_some())
                {
                    return Ok(joined);
                }
            }
            data.clear();
            event = None;
            continue;
        }
        let (field, value) = match text.split_once(':') {
            Some((f, v)) => (f, v.strip_prefix(' ').unwrap_or(v)),
            None => (text, ""),
        };
        match field {
            "data" => data.push(value.to_string()),
            "event" => event = Some(value.to_string()),
            _ => {}
        }
    }
}

/// The `result` of a JSON-RPC response (an error answer is an error).
fn result_of(text: &str, method: &str) -> Result<Value, CliError> {
    let v: Value =
        serde_json::from_str(text).map_err(|e| format!("{method}: the answer is not JSON: {e}"))?;
    if let Some(e) = v.get("error") {
        return Err(format!("{method}: the server answered with an error: {e}").into());
    }
    v.get("result")
        .cloned()
        .ok_or_else(|| CliError::invalid(format!("{method}: the answer has no result")))
}
