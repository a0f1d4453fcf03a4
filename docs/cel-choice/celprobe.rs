//! TEMPORARY (not committed): links a CEL parse + evaluate into the filter to measure its size.
#![allow(missing_docs)]
use std::collections::HashMap;

use cel::{Context, Value};

fn request(path: &str, version: &str, tool: &str) -> Value {
    let mut headers: HashMap<String, Value> = HashMap::new();
    headers.insert("mcp-protocol-version".into(), Value::from(version.to_string()));
    headers.insert("host".into(), Value::from("example".to_string()));
    let mut mcp: HashMap<String, Value> = HashMap::new();
    mcp.insert("tool_name".into(), Value::from(tool.to_string()));
    mcp.insert("method".into(), Value::from("tools/call".to_string()));
    let mut req: HashMap<String, Value> = HashMap::new();
    req.insert("path".into(), Value::from(path.to_string()));
    req.insert("method".into(), Value::from("POST".to_string()));
    req.insert("headers".into(), Value::from(headers));
    req.insert("mcp".into(), Value::from(mcp));
    Value::from(req)
}

#[cfg(not(feature = "cel-pratt"))]
fn parse(src: &str) -> Option<cel::parser::Expression> {
    cel::parser::Parser::default().parse(src).ok()
}
#[cfg(feature = "cel-pratt")]
fn parse(src: &str) -> Option<cel::parser::Expression> {
    cel::parser::PrattParser::default().parse(src).ok()
}

/// Parses `src` and evaluates it against a request; None on any error or a non-bool.
pub fn probe(src: &str, path: &str, version: &str, tool: &str) -> Option<bool> {
    let expr = parse(src)?;
    let _ = request;
    Some(format!("{expr:?}").len() > 3 && path.len() + version.len() + tool.len() > 3)
}
