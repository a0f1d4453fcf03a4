//! [`CelLimits`]: the bounds a bundle sets on its CEL expressions (`limits.cel`).

use serde::{Deserialize, Serialize};

/// Bounds on CEL expressions: size, nesting and node count are checked when the bundle is
/// loaded (a bundle with a larger expression is refused); steps are counted per evaluation
/// (an evaluation that needs more errors, which counts against the caller).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct CelLimits {
    /// Longest expression, in bytes of source (default 4096, at most 65536).
    #[serde(default = "default_cel_bytes")]
    pub max_expression_bytes: u32,
    /// Deepest nesting of the parsed expression (default 32, at most 100).
    #[serde(default = "default_cel_depth")]
    pub max_depth: u32,
    /// Most nodes in the parsed expression, macros expanded (default 1000, at most 2000).
    #[serde(default = "default_cel_nodes")]
    pub max_nodes: u32,
    /// Most evaluation steps per expression and request: one per node evaluated, one per
    /// element a macro visits, one per 64 bytes of text read or built (default 10000, at most
    /// 1000000).
    #[serde(default = "default_cel_steps")]
    pub max_steps: u32,
}

impl Default for CelLimits {
    fn default() -> Self {
        CelLimits {
            max_expression_bytes: default_cel_bytes(),
            max_depth: default_cel_depth(),
            max_nodes: default_cel_nodes(),
            max_steps: default_cel_steps(),
        }
    }
}

/// Upper bounds of the [`CelLimits`] fields (the validator refuses larger values).
pub const CEL_LIMIT_MAX: CelLimits = CelLimits {
    max_expression_bytes: 65536,
    max_depth: 100,
    max_nodes: 2000,
    max_steps: 1_000_000,
};

fn default_cel_bytes() -> u32 {
    4096
}
fn default_cel_depth() -> u32 {
    32
}
fn default_cel_nodes() -> u32 {
    1000
}
fn default_cel_steps() -> u32 {
    10_000
}
