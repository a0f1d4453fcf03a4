//! What an evaluation answers: a [`Decision`] (allow, or a [`Denial`] and its [`Reason`]),
//! the authorizer calls it asks for on the way ([`Step`], [`AuthzCall`], [`AuthzOutcome`]),
//! and its trace.

use mcp_access_bundle::Level;

use super::{Engine, PolicyId, RuleRef};

/// Why a request was denied.
#[derive(Debug, Clone, Copy, PartialEq, Eq, strum::VariantArray)]
pub enum Reason {
    /// No Gateway listener in the bundle matches the destination port / host.
    UnknownListener,
    /// Envoy routed to no backend the bundle knows.
    UnknownBackend,
    /// An authorizer said no.
    ExternalAuthDenied,
    /// An authorizer failed (unreachable, timeout, 5xx) and its failure mode is Deny.
    AuthorizerFailed,
    /// A Deny policy matched.
    DenyPolicy,
    /// Allow policies exist at the level and none admits the request.
    NotAllowed,
    /// A call of a tool the backend's ToolPin does not name (with `unpinned: Deny`).
    ToolNotPinned,
    /// A call of a tool whose listed definition differs from its pin.
    ToolDrifted,
    /// Allowed by the policies, refused by a rate limit without room (docs/semantics.md §8).
    RateLimited,
}

impl Reason {
    /// Every reason, in counter order (the order of declaration).
    pub const ALL: &'static [Reason] = <Reason as strum::VariantArray>::VARIANTS;

    /// Stable snake_case name, used in stats and logs.
    pub const fn as_str(self) -> &'static str {
        match self {
            Reason::UnknownListener => "unknown_listener",
            Reason::UnknownBackend => "unknown_backend",
            Reason::ExternalAuthDenied => "external_auth_denied",
            Reason::AuthorizerFailed => "authorizer_error",
            Reason::DenyPolicy => "deny_policy",
            Reason::NotAllowed => "not_allowed",
            Reason::ToolNotPinned => "tool_not_pinned",
            Reason::ToolDrifted => "tool_drifted",
            Reason::RateLimited => "rate_limited",
        }
    }
}

/// How an allowing authorizer edits one upstream request header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HeaderOp {
    /// Replace every value (add if absent): HTTP authorizers' headers, gRPC `append: false`.
    Set,
    /// Add one more value: gRPC `append: true` / `APPEND_IF_EXISTS_OR_ADD`.
    Append,
    /// Add only if absent: gRPC `ADD_IF_ABSENT`.
    AddIfAbsent,
    /// Replace only if present: gRPC `OVERWRITE_IF_EXISTS`.
    OverwriteIfExists,
    /// Remove the header: gRPC `headers_to_remove`.
    Remove,
}

/// One upstream header edit, applied in order (authorizers in seniority order).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeaderEdit {
    pub op: HeaderOp,
    pub name: String,
    pub value: String,
}

impl HeaderEdit {
    /// A [`HeaderOp::Set`] edit.
    pub fn set(name: impl Into<String>, value: impl Into<String>) -> Self {
        HeaderEdit {
            op: HeaderOp::Set,
            name: name.into(),
            value: value.into(),
        }
    }
}

/// An authorizer's answer, or the failure to get one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AuthzOutcome {
    /// Allowed; these edits apply to the upstream request.
    Allow { headers: Vec<HeaderEdit> },
    /// Denied: relay this response to the client.
    Deny {
        status: u16,
        headers: Vec<(String, String)>,
        body: Vec<u8>,
    },
    /// No usable answer.
    Error { detail: String },
}

/// An authorizer call the evaluation asks for: the ExternalAuth policy at a level, and its
/// authorizer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AuthzCall {
    /// Pass back to [`super::Evaluation::complete`].
    pub slot: usize,
    /// Index into [`Engine::policies`].
    pub policy: PolicyId,
    /// Index into the engine's authorizers ([`AuthzCall::authorizer`]).
    pub authorizer: usize,
    pub level: Level,
}

impl AuthzCall {
    /// `namespace/name` of the policy.
    pub fn policy_id<'e>(&self, engine: &'e Engine) -> &'e str {
        engine
            .policies
            .get(self.policy)
            .map_or("", |p| p.id.as_str())
    }

    /// The authorizer called.
    pub fn authorizer<'e>(&self, engine: &'e Engine) -> Option<&'e mcp_access_bundle::Authorizer> {
        engine.authorizers.get(self.authorizer)
    }
}

/// An authorizer's denial, relayed to the client as it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Relay {
    pub status: u16,
    pub(crate) headers: Vec<(String, String)>,
    pub(crate) body: Vec<u8>,
}

/// A denial.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Denial {
    pub level: Option<Level>,
    pub reason: Reason,
    /// The deciding policy and rule ([`Engine::named`] renders their names).
    pub by: Option<RuleRef>,
    /// The authorizer response to relay (ExternalAuthDenied).
    pub relay: Option<Relay>,
    /// Extra detail for logs (never sent unless the operator exposes details).
    pub(crate) detail: Option<String>,
    /// For [`Reason::NotAllowed`]: the scope values of the most senior Allow rule of the
    /// level that the caller's verified JWT would meet with more scopes (the answer is then an
    /// `insufficient_scope` challenge, docs/semantics.md §5.6).
    pub scope: Option<Vec<String>>,
}

impl Denial {
    /// A denial for `reason` at `level`, naming no policy.
    pub(crate) fn of(level: Option<Level>, reason: Reason) -> Denial {
        Denial {
            level,
            reason,
            by: None,
            relay: None,
            detail: None,
            scope: None,
        }
    }
}

/// The final answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Let the request through, adding these headers (in order; later replaces earlier).
    /// `by`: the last Allow rule that admitted it (Backend level over Gateway).
    Allow {
        add_headers: Vec<HeaderEdit>,
        by: Option<RuleRef>,
    },
    Deny(Denial),
}

/// What to do next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// Make these calls (in parallel), then [`super::Evaluation::complete`] each and advance again.
    Call(Vec<AuthzCall>),
    /// Calls are still outstanding.
    Waiting,
    Done(Decision),
}

/// The names a decision is shown by (records, counters, traces' readers): those of the
/// policy the user wrote and of the deciding rule, and where a derived policy's rules came
/// from.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Named<'e> {
    /// `namespace/name` of the policy the user wrote ([`super::compiled::Policy::name`]).
    pub policy: Option<&'e str>,
    pub rule: Option<&'e str>,
    /// [`super::compiled::Policy::origin`].
    pub origin: Option<&'e str>,
}

impl Engine {
    /// The names of `by` as records show them.
    pub fn named(&self, by: Option<RuleRef>) -> Named<'_> {
        let Some(r) = by else {
            return Named::default();
        };
        let p = self.policies.get(r.policy);
        Named {
            policy: p.map(|p| p.name()),
            rule: self.rule_name(r),
            origin: p.and_then(|p| p.origin.as_deref()),
        }
    }

    /// `namespace/name` of policy `pid` as the user wrote it ([`super::compiled::Policy::name`]).
    pub fn policy_name(&self, pid: PolicyId) -> Option<&str> {
        self.policies.get(pid).map(|p| p.name())
    }

    /// `namespace/name` of the policy of `r` as compiled (a derived policy's own id).
    pub fn policy_id(&self, r: RuleRef) -> Option<&str> {
        self.policies.get(r.policy).map(|p| p.id.as_str())
    }

    /// The name of rule `r` (None: a policy without rules, or no rule at all).
    pub fn rule_name(&self, r: RuleRef) -> Option<&str> {
        self.rule(r).map(|x| x.name.as_str())
    }
}
