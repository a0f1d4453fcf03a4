//! `mcp-access pin`: the tools an MCP server lists, as a ToolPin a reviewer reads and applies
//! (docs/pins.md); with `--check`, the tools compared with a ToolPin, a diff per tool that
//! changed, and a failing exit code on any difference (for CI).
//!
//! Each tool's digest is taken over the tool object exactly as the server wrote it, with the
//! filter's own canonicalization ([`mcp_access_engine::canonical_json`]), so that the digest
//! written here is the one the filter computes on the listings it reads.

mod check;
mod client;
mod write;

use std::path::PathBuf;

use mcp_access_engine::canonical_json::{digest_of, Digest};
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::Value;

pub use check::{check, CheckReport};
use client::Client;

use crate::error::CliError;
pub use client::Connection;
pub use write::{toolpin_yaml, PinTarget};

/// Nesting the canonicalization reads (deeper tool objects cannot be pinned).
const MAX_DEPTH: usize = 128;

/// One page of a `tools/list` answer: its tools as the server wrote them.
pub(crate) struct Page {
    pub(crate) tools: Vec<Box<RawValue>>,
    pub(crate) next_cursor: Option<String>,
}

#[derive(Deserialize)]
struct ListResult {
    tools: Vec<Box<RawValue>>,
    #[serde(rename = "nextCursor")]
    next_cursor: Option<String>,
}

impl Page {
    /// A page from a JSON-RPC response to `tools/list`, or from its `result` alone.
    pub(crate) fn read(text: &str) -> Result<Page, CliError> {
        #[derive(Deserialize)]
        struct Response {
            result: Option<ListResult>,
            error: Option<Value>,
        }
        let v: Value = serde_json::from_str(text).map_err(|e| format!("tools/list: {e}"))?;
        let result = if v.get("tools").is_some() {
            serde_json::from_str::<ListResult>(text)
        } else {
            let r: Response = serde_json::from_str(text).map_err(|e| format!("tools/list: {e}"))?;
            if let Some(e) = r.error {
                return Err(format!("tools/list: the server answered with an error: {e}").into());
            }
            r.result
                .ok_or_else(|| serde::de::Error::custom("no result"))
        };
        let r = result.map_err(|e| format!("tools/list: {e}"))?;
        Ok(Page {
            tools: r.tools,
            next_cursor: r.next_cursor,
        })
    }
}

/// A tool as the server lists it.
#[derive(Debug, Clone)]
pub struct ListedTool {
    pub name: String,
    /// The tool object as the server wrote it.
    pub raw: String,
    pub value: serde_json::Map<String, Value>,
    pub digest: Digest,
}

impl ListedTool {
    fn read(raw: &RawValue) -> Result<ListedTool, CliError> {
        let text = raw.get();
        let value: Value = serde_json::from_str(text).map_err(|e| e.to_string())?;
        let Value::Object(value) = value else {
            return Err(format!("a listed tool is not an object: {text}").into());
        };
        let name = value
            .get("name")
            .and_then(Value::as_str)
            .ok_or_else(|| format!("a listed tool has no name: {text}"))?
            .to_string();
        let digest = digest_of(text.as_bytes(), MAX_DEPTH).map_err(|e| {
            format!("tool {name:?} cannot be pinned: {e} (the filter leaves it out of listings)")
        })?;
        Ok(ListedTool {
            name,
            raw: text.to_string(),
            value,
            digest,
        })
    }

    /// The tool's description (empty when it has none).
    pub fn description(&self) -> &str {
        self.value
            .get("description")
            .and_then(Value::as_str)
            .unwrap_or_default()
    }
}

/// Where the tools come from, and what was seen of the server.
pub struct Listing {
    pub tools: Vec<ListedTool>,
    /// `url (server name version, revision)`, or the file read.
    pub source: String,
}

/// The tools of every page, in order; a name listed twice is an error (clients would see
/// either definition).
fn tools_of(pages: Vec<Vec<Box<RawValue>>>) -> Result<Vec<ListedTool>, CliError> {
    let mut out: Vec<ListedTool> = Vec::new();
    for raw in pages.iter().flatten() {
        let t = ListedTool::read(raw)?;
        if out.iter().any(|o| o.name == t.name) {
            return Err(format!("tool {:?} is listed twice", t.name).into());
        }
        out.push(t);
    }
    Ok(out)
}

/// The tools a live server lists.
pub fn from_server(c: Connection) -> Result<Listing, CliError> {
    let url = c.url.clone();
    let mut client = Client::connect(c)?;
    let tools = client.list_tools();
    let source = format!("{url} ({}, revision {})", client.server, client.version);
    client.close();
    Ok(Listing {
        tools: tools_of(vec![tools?])?,
        source,
    })
}

/// The tools of a saved answer: a JSON-RPC response to `tools/list` (or its result), a JSON
/// array of them (pages), or an SSE stream of such responses.
pub fn from_file(path: &PathBuf) -> Result<Listing, CliError> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let at = |e: &dyn std::fmt::Display| CliError::invalid(format!("{}: {e}", path.display()));
    let trimmed = text.trim_start();
    let messages: Vec<String> = if trimmed.starts_with('[') {
        let pages: Vec<Box<RawValue>> = serde_json::from_str(&text).map_err(|e| at(&e))?;
        pages.iter().map(|p| p.get().to_string()).collect()
    } else if trimmed.starts_with('{') {
        vec![text.clone()]
    } else {
        sse_data(&text)
    };
    if messages.is_empty() {
        return Err(at(&"no tools/list answer in it"));
    }
    let mut pages = Vec::new();
    for m in &messages {
        // A stream may carry the server's notifications and requests too.
        let is_note = serde_json::from_str::<Value>(m).is_ok_and(|v| v.get("method").is_some());
        if !is_note {
            pages.push(Page::read(m).map_err(|e| at(&e))?.tools);
        }
    }
    Ok(Listing {
        tools: tools_of(pages).map_err(|e| at(&e))?,
        source: path.display().to_string(),
    })
}

/// The data of each message event of an SSE text.
fn sse_data(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut data: Vec<&str> = Vec::new();
    for line in text.lines().chain(std::iter::once("")) {
        if line.is_empty() {
            if !data.is_empty() {
                out.push(data.join("\n"));
            }
            data.clear();
        } else if let Some(d) = line.strip_prefix("data:") {
            data.push(d.strip_prefix(' ').unwrap_or(d));
        }
    }
    out
}
