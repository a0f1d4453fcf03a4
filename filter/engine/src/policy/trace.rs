//! The decision trace (`explain`): what each step of a decision found, as data; its text
//! (the `step` and `why` columns) is rendered here and nowhere else.

use std::fmt;

use mcp_access_bundle::Level;

/// One line of the decision trace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceEntry {
    pub level: Option<Level>,
    /// The policy's id (`namespace/name`, with a derived policy's suffix).
    pub policy: Option<String>,
    pub rule: Option<String>,
    pub event: TraceEvent,
}

impl TraceEntry {
    /// The step's name: `resolve`, `route`, `externalAuth`, `deny` or `allow`.
    pub fn step(&self) -> &'static str {
        self.event.step()
    }
}

/// What one step of a decision found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TraceEvent {
    /// The request's listener or backend is unknown: denied (`detail` names what it came by).
    Unresolved {
        detail: String,
    },
    /// Whether a route-scoped backend policy applies through `name`, the route (or cluster)
    /// the request came by (docs/semantics.md §1.6).
    Route {
        name: String,
        applies: RouteUse,
    },
    /// An externalAuth policy whose `when` does not select the request.
    AuthorizerNotSelected,
    AuthorizerAllowed,
    AuthorizerDenied {
        status: u16,
    },
    /// The authorizer gave no usable answer, and its failure mode lets the request go on.
    AuthorizerFailedOpen {
        detail: String,
    },
    AuthorizerFailed {
        detail: String,
    },
    /// A Deny rule matched.
    DenyMatched,
    /// The level has no Allow policy that applies: it admits (`when`: it has Allow policies
    /// whose `when` selects nothing).
    NoAllowPolicy {
        when: bool,
    },
    /// An Allow rule admitted the request.
    Admitted,
    /// No Allow rule admits the request: denied.
    NotAdmitted,
    /// The Allow rule would admit the request if the caller's token held these scopes.
    ShortOfScope {
        scopes: Vec<String>,
    },
    /// An Allow rule did not admit the request: `what` of it does not match (`explain`'s
    /// account of [`TraceEvent::NotAdmitted`]).
    RuleMismatch {
        what: String,
    },
}

/// How a route-scoped backend policy relates to the route or cluster a request came by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RouteUse {
    /// The request came by one of its routes.
    Applies,
    /// It came by another route.
    OtherRoute,
    /// It came by a cluster its routes may use too: an Allow policy admits nothing, and its
    /// presence keeps the level default-deny.
    AdmitsNothing,
    /// It came by a cluster, not by one of its routes (a Deny or externalAuth policy).
    OtherCluster,
}

impl TraceEvent {
    /// The step this event belongs to.
    pub fn step(&self) -> &'static str {
        match self {
            TraceEvent::Unresolved { .. } => "resolve",
            TraceEvent::Route { .. } => "route",
            TraceEvent::AuthorizerNotSelected
            | TraceEvent::AuthorizerAllowed
            | TraceEvent::AuthorizerDenied { .. }
            | TraceEvent::AuthorizerFailedOpen { .. }
            | TraceEvent::AuthorizerFailed { .. } => "externalAuth",
            TraceEvent::DenyMatched => "deny",
            TraceEvent::NoAllowPolicy { .. }
            | TraceEvent::Admitted
            | TraceEvent::NotAdmitted
            | TraceEvent::ShortOfScope { .. }
            | TraceEvent::RuleMismatch { .. } => "allow",
        }
    }
}

/// The trace's `why` column.
impl fmt::Display for TraceEvent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TraceEvent::Unresolved { detail } => write!(f, "deny: {detail}"),
            TraceEvent::Route { name, applies } => match applies {
                RouteUse::Applies => write!(f, "applies: {name} is one of its routes"),
                RouteUse::OtherRoute => write!(f, "does not apply: {name} is another route"),
                RouteUse::AdmitsNothing => write!(
                    f,
                    "admits nothing: the request came by cluster {name}, which its routes may use too (its presence keeps this level default-deny)"
                ),
                RouteUse::OtherCluster => write!(
                    f,
                    "does not apply: the request came by cluster {name}, not by one of its routes"
                ),
            },
            TraceEvent::AuthorizerNotSelected => f.write_str("not selected"),
            TraceEvent::AuthorizerAllowed => f.write_str("allowed"),
            TraceEvent::AuthorizerDenied { status } => write!(f, "denied with {status}"),
            TraceEvent::AuthorizerFailedOpen { detail } => write!(f, "failed open: {detail}"),
            TraceEvent::AuthorizerFailed { detail } => write!(f, "failed: {detail}"),
            TraceEvent::DenyMatched => f.write_str("matched"),
            TraceEvent::NoAllowPolicy { when: true } => {
                f.write_str("no Allow policy applies (when)")
            }
            TraceEvent::NoAllowPolicy { when: false } => f.write_str("no Allow policy"),
            TraceEvent::Admitted => f.write_str("admitted"),
            TraceEvent::NotAdmitted => f.write_str("no rule admits"),
            TraceEvent::ShortOfScope { scopes } => write!(
                f,
                "would admit with scope {:?}: insufficient_scope",
                scopes.join(" ")
            ),
            TraceEvent::RuleMismatch { what } => write!(f, "not admitted: {what} does not match"),
        }
    }
}
