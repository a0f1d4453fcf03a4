//! `XBackend`: the agentic backend a route or policy names.

use crate::check::Checker;
use crate::types::*;

pub(crate) fn xbackend(s: &XBackendSpec, c: &mut Checker) {
    let Some(mcp) = &s.mcp else {
        c.err("spec.mcp", "Required value");
        return;
    };
    if c.required("spec.mcp.port", &mcp.port) {
        c.range("spec.mcp.port", mcp.port.unwrap_or_default(), 1, 65535);
    }
    c.rule(
        "spec.mcp",
        mcp.service_name.is_some() != mcp.hostname.is_some(),
        "object",
        "exactly one of the fields in [serviceName hostname] must be set",
    );
}

// ---------------------------------------------------------------------------------------
// XAccessPolicy
