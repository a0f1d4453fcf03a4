//! The MCP methods the project knows, in one table ([`METHODS`]) that the validator, the
//! compiler, the filter's parser, matchers, callouts and header checks all read
//! (docs/semantics.md §4).
//!
//! A rule names a method of the table that has a [`Category`], or a category itself; `params` is
//! allowed only for the methods that carry a [`Param`]. The base protocol is the table's `base`
//! methods plus every method under [`BASE_PREFIXES`].

/// An MCP protocol revision the filter accepts, oldest first (docs/semantics.md §4.4).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Revision {
    V2025_03_26,
    V2025_06_18,
    V2025_11_25,
    V2026_07_28,
}

impl Revision {
    /// Every revision the filter accepts, oldest first.
    pub const ALL: [Revision; 4] = [
        Revision::V2025_03_26,
        Revision::V2025_06_18,
        Revision::V2025_11_25,
        Revision::V2026_07_28,
    ];

    /// The revision of a request that names none: the MCP transport lets a server take a
    /// request without `MCP-Protocol-Version` as 2025-03-26.
    pub const UNNAMED: Revision = Revision::V2025_03_26;

    /// The first revision whose requests carry `Mcp-Method` / `Mcp-Name` (SEP-2243).
    pub(crate) const FIRST_WITH_HEADERS: Revision = Revision::V2026_07_28;

    /// The revision's date, as `MCP-Protocol-Version` carries it.
    pub fn as_str(self) -> &'static str {
        match self {
            Revision::V2025_03_26 => "2025-03-26",
            Revision::V2025_06_18 => "2025-06-18",
            Revision::V2025_11_25 => "2025-11-25",
            Revision::V2026_07_28 => "2026-07-28",
        }
    }

    /// The revision a protocol version names exactly; None for any other text.
    pub fn parse(version: &str) -> Option<Revision> {
        Revision::ALL.into_iter().find(|r| r.as_str() == version)
    }

    /// Whether the revision is stateless: no sessions, no HTTP GET stream, every request a
    /// POST (2026-07-28 on).
    pub fn is_stateless(self) -> bool {
        self >= Revision::V2026_07_28
    }

    /// Whether listing results of this revision carry `cacheScope` (SEP-2549).
    pub fn has_cache_scope(self) -> bool {
        self >= Revision::V2026_07_28
    }

    const fn bit(self) -> u8 {
        1 << self as u8
    }
}

/// Whether a protocol version (a revision date, compared as text) is one whose requests must
/// carry the headers of [`Revision::FIRST_WITH_HEADERS`]; later, unknown dates count too.
pub fn is_header_revision(version: &str) -> bool {
    version >= Revision::FIRST_WITH_HEADERS.as_str()
}

/// The JSON-RPC method whose `params.protocolVersion` names the revision the client asks for.
pub const INITIALIZE: &str = "initialize";
/// The MCP headers of the Streamable HTTP transport the filter reads.
pub mod headers {
    /// `Mcp-Session-Id`, lowercase.
    pub const SESSION_ID: &str = "mcp-session-id";

    /// An MCP header the filter compares with the body (SEP-2243).
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub enum McpHeader {
        Method,
        Name,
        ProtocolVersion,
    }

    impl McpHeader {
        /// Every one, in the order the filter compares them with the body.
        pub const ALL: [McpHeader; 3] = [
            McpHeader::Method,
            McpHeader::Name,
            McpHeader::ProtocolVersion,
        ];

        /// The header's name, lowercase.
        pub const fn name(self) -> &'static str {
            match self {
                McpHeader::Method => "mcp-method",
                McpHeader::Name => "mcp-name",
                McpHeader::ProtocolVersion => "mcp-protocol-version",
            }
        }

        /// The header as the MCP specification spells it.
        pub const fn spelled(self) -> &'static str {
            match self {
                McpHeader::Method => "Mcp-Method",
                McpHeader::Name => "Mcp-Name",
                McpHeader::ProtocolVersion => "MCP-Protocol-Version",
            }
        }
    }
}

/// The method names the filter itself refers to (every other name is only in `METHODS`).
pub const TOOLS_LIST: &str = "tools/list";
pub const PROMPTS_LIST: &str = "prompts/list";
pub const RESOURCES_LIST: &str = "resources/list";
pub const RESOURCES_TEMPLATES_LIST: &str = "resources/templates/list";
pub const TOOLS_CALL: &str = "tools/call";
pub const PROMPTS_GET: &str = "prompts/get";
pub const RESOURCES_READ: &str = "resources/read";
pub const RESOURCES_SUBSCRIBE: &str = "resources/subscribe";
/// The method whose `params.ref` names a prompt or resource.
pub const COMPLETION_COMPLETE: &str = "completion/complete";
/// The method whose resource URIs are judged one by one as [`RESOURCES_SUBSCRIBE`].
pub const SUBSCRIPTIONS_LISTEN: &str = "subscriptions/listen";

/// What a method gives access to; a rule may name the category to cover every method under
/// its prefix (`tools` covers `tools/...`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Category {
    Tools,
    Prompts,
    Resources,
}

impl Category {
    pub(crate) const ALL: [Category; 3] = [Category::Tools, Category::Prompts, Category::Resources];

    /// The name a rule uses for the category.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Category::Tools => "tools",
            Category::Prompts => "prompts",
            Category::Resources => "resources",
        }
    }

    /// The category a rule's method name stands for, if it names one.
    pub fn named(name: &str) -> Option<Category> {
        Category::ALL.into_iter().find(|c| c.as_str() == name)
    }

    /// Whether `method` is one of the table's methods of this category (docs/semantics.md
    /// §4: a category names methods, not every string under its prefix).
    pub fn covers(self, method: &str) -> bool {
        lookup(method).is_some_and(|m| m.category == Some(self))
    }

    /// Whether `method` is under this category's prefix (`tools/` followed by anything).
    pub fn prefixes(self, method: &str) -> bool {
        method
            .strip_prefix(self.as_str())
            .is_some_and(|rest| rest.starts_with('/'))
    }
}

/// The member of `params` that names what a method reaches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Param {
    /// `params.name`: a tool or prompt name.
    Name,
    /// `params.uri`: a resource URI.
    Uri,
}

impl Param {
    /// The member's key in `params`.
    pub fn key(self) -> &'static str {
        match self {
            Param::Name => "name",
            Param::Uri => "uri",
        }
    }
}

/// One client-to-server MCP method: a row of `METHODS`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MethodSpec {
    pub(crate) name: &'static str,
    /// None: a rule cannot name the method (only a rule without `mcp` admits it, or the base
    /// protocol when `base`).
    pub category: Option<Category>,
    /// The param the filter extracts (a request without it is invalid) and rules may list.
    pub param: Option<Param>,
    /// Base protocol: reaches no tool, prompt or resource.
    pub(crate) base: bool,
    /// The revisions that have the method (a bit per [`Revision`]).
    revisions: u8,
    /// From [`Revision::FIRST_WITH_HEADERS`] on, the request must carry its param in `Mcp-Name`.
    pub(crate) name_header: bool,
    /// The method its resource URIs (`params.notifications.resourceSubscriptions`) are
    /// judged as, one by one.
    pub(crate) subscribes_as: Option<&'static MethodSpec>,
    /// The listing the method is, if it is one.
    pub(crate) listing: Option<&'static Listing>,
}

impl MethodSpec {
    /// The method's name.
    pub fn name(&self) -> &'static str {
        self.name
    }

    /// Whether revision `r` has the method.
    pub(crate) fn in_revision(&self, r: Revision) -> bool {
        self.revisions & r.bit() != 0
    }
}

/// A JSON-RPC method as a request names it, resolved once against `METHODS`: one of the
/// table's, or another name (left to the policies; base protocol under `BASE_PREFIXES`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Method {
    Known(&'static MethodSpec),
    Other(String),
}

impl Method {
    /// The method named `name`.
    pub fn resolve(name: &str) -> Method {
        match lookup(name) {
            Some(spec) => Method::Known(spec),
            None => Method::Other(name.to_owned()),
        }
    }

    /// The method's name.
    pub fn as_str(&self) -> &str {
        match self {
            Method::Known(spec) => spec.name,
            Method::Other(name) => name,
        }
    }

    /// The table's row, for a method it knows.
    pub fn spec(&self) -> Option<&'static MethodSpec> {
        match self {
            Method::Known(spec) => Some(spec),
            Method::Other(_) => None,
        }
    }

    /// Whether the method is base protocol: it reaches no tool, prompt or resource.
    pub fn is_base(&self) -> bool {
        match self {
            Method::Known(spec) => spec.base || under_base_prefix(spec.name),
            Method::Other(name) => under_base_prefix(name),
        }
    }

    /// The param the method must carry, if any.
    pub fn param(&self) -> Option<Param> {
        self.spec().and_then(|m| m.param)
    }

    /// The category of a method of the table.
    pub fn category(&self) -> Option<Category> {
        self.spec().and_then(|m| m.category)
    }

    /// The category of the item the method's param names (a tool, prompt or resource), for
    /// the methods that carry one.
    pub fn item_category(&self) -> Option<Category> {
        self.spec()
            .filter(|m| m.param.is_some())
            .and_then(|m| m.category)
    }

    /// The method its resource URIs are judged as ([`subscribes_as`]).
    pub fn subscribes_as(&self) -> Option<&'static MethodSpec> {
        self.spec().and_then(|m| m.subscribes_as)
    }

    /// The listing the method is, if it is one.
    pub fn listing(&self) -> Option<&'static Listing> {
        self.spec().and_then(|m| m.listing)
    }

    /// Whether revision `r` lacks the method ([`missing_in`]).
    pub fn missing_in(&self, r: Revision) -> bool {
        self.spec().is_some_and(|m| !m.in_revision(r))
    }

    /// Whether a request of the header revision calling the method must carry `Mcp-Name`.
    pub fn requires_name_header(&self) -> bool {
        self.spec().is_some_and(|m| m.name_header)
    }
}

impl From<&'static MethodSpec> for Method {
    fn from(spec: &'static MethodSpec) -> Method {
        Method::Known(spec)
    }
}

impl From<&str> for Method {
    fn from(name: &str) -> Method {
        Method::resolve(name)
    }
}

impl From<String> for Method {
    fn from(name: String) -> Method {
        match lookup(&name) {
            Some(spec) => Method::Known(spec),
            None => Method::Other(name),
        }
    }
}

impl PartialEq<str> for Method {
    fn eq(&self, other: &str) -> bool {
        self.as_str() == other
    }
}

impl PartialEq<&str> for Method {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

impl std::fmt::Display for Method {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The revisions from `first` to `last`, both included.
const fn span(first: Revision, last: Revision) -> u8 {
    let mut bits = 0;
    let mut r = first as u8;
    while r <= last as u8 {
        bits |= 1 << r;
        r += 1;
    }
    bits
}

/// Every revision.
const ALL: u8 = span(V2025_03_26, V2026_07_28);
/// Every revision before 2026-07-28 (stateful MCP: `initialize`, sessions).
const STATEFUL: u8 = span(V2025_03_26, V2025_11_25);

const fn method(
    name: &'static str,
    category: Option<Category>,
    param: Option<Param>,
    base: bool,
    revisions: u8,
    name_header: bool,
) -> MethodSpec {
    MethodSpec {
        name,
        category,
        param,
        base,
        revisions,
        name_header,
        subscribes_as: None,
        listing: None,
    }
}

/// The rows the filter refers to by themselves (a listing's items are judged as a call of
/// one; a subscription as `resources/subscribe`).
mod row {
    use super::*;

    pub(super) const TOOLS_LIST: MethodSpec = MethodSpec {
        listing: Some(&TOOLS_LISTING),
        ..method(super::TOOLS_LIST, Some(Tools), None, true, ALL, false)
    };
    pub(super) const PROMPTS_LIST: MethodSpec = MethodSpec {
        listing: Some(&PROMPTS_LISTING),
        ..method(super::PROMPTS_LIST, Some(Prompts), None, true, ALL, false)
    };
    pub(super) const RESOURCES_LIST: MethodSpec = MethodSpec {
        listing: Some(&RESOURCES_LISTING),
        ..method(
            super::RESOURCES_LIST,
            Some(Resources),
            None,
            true,
            ALL,
            false,
        )
    };
    pub(super) const RESOURCES_TEMPLATES_LIST: MethodSpec = MethodSpec {
        listing: Some(&TEMPLATES_LISTING),
        ..method(
            super::RESOURCES_TEMPLATES_LIST,
            Some(Resources),
            None,
            true,
            ALL,
            false,
        )
    };
    pub(super) const TOOLS_CALL: MethodSpec =
        method(super::TOOLS_CALL, Some(Tools), Some(Name), false, ALL, true);
    pub(super) const PROMPTS_GET: MethodSpec = method(
        super::PROMPTS_GET,
        Some(Prompts),
        Some(Name),
        false,
        ALL,
        true,
    );
    pub(super) const RESOURCES_READ: MethodSpec = method(
        super::RESOURCES_READ,
        Some(Resources),
        Some(Uri),
        false,
        ALL,
        true,
    );
    pub(super) const RESOURCES_SUBSCRIBE: MethodSpec = method(
        super::RESOURCES_SUBSCRIBE,
        Some(Resources),
        Some(Uri),
        false,
        STATEFUL,
        false,
    );
}

/// `prompts/get`'s row.
pub const PROMPTS_GET_SPEC: &MethodSpec = &row::PROMPTS_GET;
/// `resources/read`'s row.
pub const RESOURCES_READ_SPEC: &MethodSpec = &row::RESOURCES_READ;

use Category::{Prompts, Resources, Tools};
use Param::{Name, Uri};
use Revision::{V2025_03_26, V2025_11_25, V2026_07_28};

/// The client-to-server methods, in the order rules list them in error messages, with the
/// revisions that have them (the revisions' `schema.ts`; 2026-07-28's tasks methods are its
/// official tasks extension). Notifications and methods not listed here under
/// [`BASE_PREFIXES`] are base protocol in every revision.
pub(crate) const METHODS: &[MethodSpec] = &[
    row::TOOLS_LIST,
    row::PROMPTS_LIST,
    row::RESOURCES_LIST,
    row::RESOURCES_TEMPLATES_LIST,
    row::TOOLS_CALL,
    row::PROMPTS_GET,
    row::RESOURCES_READ,
    row::RESOURCES_SUBSCRIBE,
    method(
        "resources/unsubscribe",
        Some(Resources),
        Some(Uri),
        false,
        STATEFUL,
        false,
    ),
    method(INITIALIZE, None, None, true, STATEFUL, false),
    method("ping", None, None, true, STATEFUL, false),
    method("logging/setLevel", None, None, true, STATEFUL, false),
    method(COMPLETION_COMPLETE, None, None, true, ALL, false),
    method(
        "notifications/initialized",
        None,
        None,
        true,
        STATEFUL,
        false,
    ),
    method(
        "notifications/roots/list_changed",
        None,
        None,
        true,
        STATEFUL,
        false,
    ),
    method("notifications/cancelled", None, None, true, ALL, false),
    method("notifications/progress", None, None, true, ALL, false),
    method(
        "tasks/get",
        None,
        None,
        false,
        span(V2025_11_25, V2026_07_28),
        false,
    ),
    method("tasks/result", None, None, false, V2025_11_25.bit(), false),
    method("tasks/list", None, None, false, V2025_11_25.bit(), false),
    method(
        "tasks/cancel",
        None,
        None,
        false,
        span(V2025_11_25, V2026_07_28),
        false,
    ),
    method("tasks/update", None, None, false, V2026_07_28.bit(), false),
    method(
        "server/discover",
        None,
        None,
        true,
        V2026_07_28.bit(),
        false,
    ),
    MethodSpec {
        subscribes_as: Some(&row::RESOURCES_SUBSCRIBE),
        ..method(
            SUBSCRIPTIONS_LISTEN,
            None,
            None,
            true,
            V2026_07_28.bit(),
            false,
        )
    },
];

/// A listing method whose responses are filtered per caller (docs/semantics.md §5.4).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Listing {
    /// The listing method.
    pub method: &'static str,
    /// The member of `result` that holds the items.
    pub items: &'static str,
    /// The method a listed item is judged as, as if it were called.
    pub judged_as: &'static MethodSpec,
    /// The item's member that names it (its [`Param`] for `judged_as`); None for resource
    /// templates, judged as a read of some URI.
    pub key: Option<Param>,
}

/// The listings, each with how its items are judged (the filter also recognises a listing
/// answer by its `items` member, docs/semantics.md §5.4).
pub const LISTINGS: &[Listing] = &[
    TOOLS_LISTING,
    PROMPTS_LISTING,
    RESOURCES_LISTING,
    TEMPLATES_LISTING,
];

const TOOLS_LISTING: Listing = Listing {
    method: TOOLS_LIST,
    items: "tools",
    judged_as: &row::TOOLS_CALL,
    key: Some(Param::Name),
};
const PROMPTS_LISTING: Listing = Listing {
    method: PROMPTS_LIST,
    items: "prompts",
    judged_as: &row::PROMPTS_GET,
    key: Some(Param::Name),
};
const RESOURCES_LISTING: Listing = Listing {
    method: RESOURCES_LIST,
    items: "resources",
    judged_as: &row::RESOURCES_READ,
    key: Some(Param::Uri),
};
const TEMPLATES_LISTING: Listing = Listing {
    method: RESOURCES_TEMPLATES_LIST,
    items: "resourceTemplates",
    judged_as: &row::RESOURCES_READ,
    key: None,
};

/// The listing `method` is, if it is one.
pub fn listing(method: &str) -> Option<&'static Listing> {
    lookup(method).and_then(|m| m.listing)
}

/// Every method under these prefixes is base protocol.
pub(crate) const BASE_PREFIXES: &[&str] = &["notifications/", "completion/", "logging/"];

/// The table's entry for `name`.
pub fn lookup(name: &str) -> Option<&'static MethodSpec> {
    METHODS.iter().find(|m| m.name == name)
}

fn under_base_prefix(method: &str) -> bool {
    BASE_PREFIXES.iter().any(|p| method.starts_with(p))
}

/// Whether a JSON-RPC method is base protocol.
pub fn is_base(method: &str) -> bool {
    Method::resolve(method).is_base()
}

/// The param a method must carry, if any.
pub fn param_of(method: &str) -> Option<Param> {
    lookup(method).and_then(|m| m.param)
}

/// The method names a rule may use: the categories, then the table's methods of a category.
pub fn rule_names() -> impl Iterator<Item = &'static str> {
    let categories = Category::ALL.into_iter().map(Category::as_str);
    let methods = METHODS
        .iter()
        .filter(|m| m.category.is_some())
        .map(|m| m.name);
    categories.chain(methods)
}

/// Whether a rule may name `name`.
pub(crate) fn is_rule_name(name: &str) -> bool {
    rule_names().any(|n| n == name)
}

/// Whether a rule naming `name` may list `params`.
pub fn takes_params(name: &str) -> bool {
    lookup(name).is_some_and(|m| m.category.is_some() && m.param.is_some())
}

/// The method whose resource URIs `method` (`subscriptions/listen`) names one by one, and
/// as which each is judged (`resources/subscribe`).
pub fn subscribes_as(method: &str) -> Option<&'static str> {
    lookup(method)
        .and_then(|m| m.subscribes_as)
        .map(MethodSpec::name)
}

/// Whether `method` is one the table knows but revision `r` does not have. Methods the
/// table does not know are left to the policies.
pub fn missing_in(method: &str, r: Revision) -> bool {
    lookup(method).is_some_and(|m| !m.in_revision(r))
}

/// Whether a request of the header revision calling `method` must carry `Mcp-Name`.
pub fn requires_name_header(method: &str) -> bool {
    lookup(method).is_some_and(|m| m.name_header)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rule_names_are_the_documented_list() {
        let names: Vec<_> = rule_names().collect();
        assert_eq!(
            names,
            [
                "tools",
                "prompts",
                "resources",
                "tools/list",
                "prompts/list",
                "resources/list",
                "resources/templates/list",
                "tools/call",
                "prompts/get",
                "resources/read",
                "resources/subscribe",
                "resources/unsubscribe",
            ]
        );
        assert!(!is_rule_name("initialize") && !is_rule_name("tasks/get"));
        let with_params: Vec<_> = names.into_iter().filter(|n| takes_params(n)).collect();
        assert_eq!(
            with_params,
            [
                "tools/call",
                "prompts/get",
                "resources/read",
                "resources/subscribe",
                "resources/unsubscribe",
            ]
        );
    }

    #[test]
    fn base_protocol() {
        for m in [
            "initialize",
            "ping",
            "tools/list",
            "prompts/list",
            "resources/list",
            "resources/templates/list",
            "notifications/initialized",
            "notifications/cancelled",
            "completion/complete",
            "logging/setLevel",
            "server/discover",
            "subscriptions/listen",
        ] {
            assert!(is_base(m), "{m}");
        }
        for m in [
            "tools/call",
            "prompts/get",
            "resources/read",
            "resources/subscribe",
            "tasks/get",
            "notifications",
            "Initialize",
            "x/notifications/",
        ] {
            assert!(!is_base(m), "{m}");
        }
    }

    #[test]
    fn table_agrees_with_itself() {
        for m in METHODS {
            assert_eq!(lookup(m.name), Some(m), "{} listed twice", m.name);
            // A method's category is the one whose prefix it carries.
            let by_prefix = Category::ALL.into_iter().find(|c| c.prefixes(m.name));
            assert_eq!(m.category, by_prefix, "{}", m.name);
            // A method that must name itself in Mcp-Name has a param to name.
            assert!(!m.name_header || m.param.is_some(), "{}", m.name);
            assert!(!(m.base && m.param.is_some()), "{}", m.name);
        }
        assert_eq!(param_of("tools/call"), Some(Param::Name));
        assert_eq!(param_of("prompts/get"), Some(Param::Name));
        assert_eq!(param_of("resources/unsubscribe"), Some(Param::Uri));
        assert_eq!(param_of("resources/templates/list"), None);
        let named: Vec<_> = METHODS
            .iter()
            .filter(|m| requires_name_header(m.name))
            .map(|m| m.name)
            .collect();
        assert_eq!(named, ["tools/call", "prompts/get", "resources/read"]);
    }

    #[test]
    fn categories_cover_their_prefix() {
        assert!(Category::Tools.covers("tools/call"));
        assert!(!Category::Tools.covers("tools/anything"));
        assert!(!Category::Tools.covers("tools/list "));
        assert!(Category::Tools.prefixes("tools/anything"));
        assert!(!Category::Tools.prefixes("toolsx/call"));
        assert!(!Category::Tools.covers("tools"));
        assert!(!Category::Tools.covers("toolsx/call"));
        assert!(!Category::Resources.covers("notifications/resources/updated"));
        assert_eq!(Category::named("prompts"), Some(Category::Prompts));
        assert_eq!(Category::named("prompts/get"), None);
    }

    #[test]
    fn methods_per_revision() {
        use Revision::*;
        let has = |m: &str, r: Revision| lookup(m).is_some_and(|x| x.in_revision(r));
        // Every revision: what reaches tools, prompts and resources, and the listings.
        for r in Revision::ALL {
            for m in ["tools/list", "tools/call", "prompts/get", "resources/read"] {
                assert!(has(m, r), "{m} {r:?}");
            }
            assert!(has("completion/complete", r) && has("notifications/cancelled", r));
        }
        // Stateful revisions only: the handshake, ping, logging, resource subscriptions.
        for m in [
            "initialize",
            "notifications/initialized",
            "ping",
            "logging/setLevel",
            "resources/subscribe",
            "resources/unsubscribe",
        ] {
            assert!(has(m, V2025_03_26) && has(m, V2025_11_25), "{m}");
            assert!(missing_in(m, V2026_07_28), "{m}");
        }
        // Tasks: 2025-11-25; 2026-07-28 moved them to an extension (no list, no result).
        assert!(missing_in("tasks/get", V2025_06_18) && has("tasks/get", V2025_11_25));
        assert!(has("tasks/get", V2026_07_28) && has("tasks/update", V2026_07_28));
        assert!(missing_in("tasks/list", V2026_07_28) && missing_in("tasks/result", V2026_07_28));
        assert!(missing_in("tasks/update", V2025_11_25));
        // 2026-07-28 only.
        for m in ["server/discover", "subscriptions/listen"] {
            assert!(has(m, V2026_07_28) && missing_in(m, V2025_11_25), "{m}");
        }
        assert_eq!(
            subscribes_as("subscriptions/listen"),
            Some("resources/subscribe")
        );
        assert_eq!(subscribes_as("resources/subscribe"), None);
        // Unknown methods are left to the policies.
        assert!(!missing_in("x/custom", V2026_07_28));
        assert_eq!(Revision::parse("2025-06-18"), Some(V2025_06_18));
        assert_eq!(Revision::parse("2024-11-05"), None);
        assert_eq!(Revision::parse("2026-07-28 "), None);
        assert!(V2026_07_28.has_cache_scope() && !V2025_11_25.has_cache_scope());
        assert!(V2026_07_28.is_stateless() && !V2025_11_25.is_stateless());
    }

    #[test]
    fn listings_judge_items_as_the_method_they_list() {
        for l in LISTINGS {
            let m = lookup(l.method).unwrap_or_else(|| panic!("{}", l.method));
            assert!(m.base && m.category.is_some(), "{}", l.method);
            assert_eq!(l.key.is_some(), l.items != "resourceTemplates");
            // An item is judged as a method of the same category, by the param it names.
            assert_eq!(lookup(l.judged_as.name), Some(l.judged_as));
            assert_eq!(l.judged_as.category, m.category);
            assert!(l.key.is_none() || l.judged_as.param == l.key);
            assert_eq!(m.listing, Some(l));
        }
        assert_eq!(
            listing("tools/list").map(|l| l.judged_as.name),
            Some("tools/call")
        );
        assert_eq!(listing("tools/call"), None);
    }

    #[test]
    fn a_method_is_resolved_once_and_answers_as_its_row() {
        for m in METHODS {
            let resolved = Method::resolve(m.name);
            assert_eq!(resolved, Method::Known(m));
            assert_eq!(resolved.as_str(), m.name);
            assert_eq!(resolved.is_base(), is_base(m.name), "{}", m.name);
            assert_eq!(resolved.param(), m.param);
            assert_eq!(resolved.listing(), listing(m.name));
            assert_eq!(Method::from(m.name.to_string()), resolved);
        }
        let other = Method::resolve("notifications/x");
        assert_eq!(other, Method::Other("notifications/x".into()));
        assert!(other.is_base() && other.spec().is_none() && other.listing().is_none());
        assert!(!Method::from("x/custom").is_base());
        assert!(!Method::from("x/custom").missing_in(V2025_11_25));
        assert_eq!(
            Method::from(SUBSCRIPTIONS_LISTEN)
                .subscribes_as()
                .map(MethodSpec::name),
            Some(RESOURCES_SUBSCRIBE)
        );
        assert_eq!(Method::from(TOOLS_CALL).item_category(), Some(Tools));
        assert_eq!(Method::from(TOOLS_LIST).item_category(), None);
    }

    #[test]
    fn header_revisions() {
        assert!(is_header_revision("2026-07-28"));
        assert!(is_header_revision("2027-01-01"));
        for r in Revision::ALL {
            assert_eq!(
                is_header_revision(r.as_str()),
                r >= Revision::FIRST_WITH_HEADERS
            );
        }
        assert!(!is_header_revision("2025-11-25"));
    }
}
