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

/// One client-to-server MCP method.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Method {
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
    pub(crate) subscribes_as: Option<&'static str>,
}

impl Method {
    /// Whether revision `r` has the method.
    pub(crate) fn in_revision(&self, r: Revision) -> bool {
        self.revisions & r.bit() != 0
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
) -> Method {
    Method {
        name,
        category,
        param,
        base,
        revisions,
        name_header,
        subscribes_as: None,
    }
}

use Category::{Prompts, Resources, Tools};
use Param::{Name, Uri};
use Revision::{V2025_03_26, V2025_11_25, V2026_07_28};

/// The client-to-server methods, in the order rules list them in error messages, with the
/// revisions that have them (the revisions' `schema.ts`; 2026-07-28's tasks methods are its
/// official tasks extension). Notifications and methods not listed here under
/// [`BASE_PREFIXES`] are base protocol in every revision.
pub(crate) const METHODS: &[Method] = &[
    method("tools/list", Some(Tools), None, true, ALL, false),
    method("prompts/list", Some(Prompts), None, true, ALL, false),
    method("resources/list", Some(Resources), None, true, ALL, false),
    method(
        "resources/templates/list",
        Some(Resources),
        None,
        true,
        ALL,
        false,
    ),
    method("tools/call", Some(Tools), Some(Name), false, ALL, true),
    method("prompts/get", Some(Prompts), Some(Name), false, ALL, true),
    method(
        "resources/read",
        Some(Resources),
        Some(Uri),
        false,
        ALL,
        true,
    ),
    method(
        "resources/subscribe",
        Some(Resources),
        Some(Uri),
        false,
        STATEFUL,
        false,
    ),
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
    method("completion/complete", None, None, true, ALL, false),
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
    Method {
        subscribes_as: Some("resources/subscribe"),
        ..method(
            "subscriptions/listen",
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
    pub judged_as: &'static str,
    /// The item's member that names it (its [`Param`] for `judged_as`); None for resource
    /// templates, judged as a read of some URI.
    pub key: Option<Param>,
}

/// The listings, each with how its items are judged (the filter also recognises a listing
/// answer by its `items` member, docs/semantics.md §5.4).
pub const LISTINGS: &[Listing] = &[
    Listing {
        method: "tools/list",
        items: "tools",
        judged_as: "tools/call",
        key: Some(Param::Name),
    },
    Listing {
        method: "prompts/list",
        items: "prompts",
        judged_as: "prompts/get",
        key: Some(Param::Name),
    },
    Listing {
        method: "resources/list",
        items: "resources",
        judged_as: "resources/read",
        key: Some(Param::Uri),
    },
    Listing {
        method: "resources/templates/list",
        items: "resourceTemplates",
        judged_as: "resources/read",
        key: None,
    },
];

/// The listing `method` is, if it is one.
pub fn listing(method: &str) -> Option<&'static Listing> {
    LISTINGS.iter().find(|l| l.method == method)
}

/// Every method under these prefixes is base protocol.
pub(crate) const BASE_PREFIXES: &[&str] = &["notifications/", "completion/", "logging/"];

/// The table's entry for `name`.
pub fn lookup(name: &str) -> Option<&'static Method> {
    METHODS.iter().find(|m| m.name == name)
}

/// Whether a JSON-RPC method is base protocol.
pub fn is_base(method: &str) -> bool {
    lookup(method).is_some_and(|m| m.base) || BASE_PREFIXES.iter().any(|p| method.starts_with(p))
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
    lookup(method).and_then(|m| m.subscribes_as)
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
            assert_eq!(lookup(l.judged_as).and_then(|j| j.category), m.category);
            assert!(l.key.is_none() || param_of(l.judged_as) == l.key);
        }
        assert_eq!(
            listing("tools/list").map(|l| l.judged_as),
            Some("tools/call")
        );
        assert_eq!(listing("tools/call"), None);
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
