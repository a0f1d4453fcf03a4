//! The MCP methods the project knows, in one table ([`METHODS`]) that the validator, the
//! compiler, the filter's parser, matchers, callouts and header checks all read
//! (docs/semantics.md §4).
//!
//! A rule names a method of the table that has a [`Category`], or a category itself; `params` is
//! allowed only for the methods that carry a [`Param`]. The base protocol is the table's `base`
//! methods plus every method under [`BASE_PREFIXES`].

/// An MCP protocol revision the method table refers to, oldest first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Revision {
    V2025_03_26,
    V2025_11_25,
    V2026_07_28,
}

impl Revision {
    /// Every revision of the enum, oldest first.
    #[cfg(test)]
    const ALL: [Revision; 3] = [
        Revision::V2025_03_26,
        Revision::V2025_11_25,
        Revision::V2026_07_28,
    ];

    /// The first revision whose requests carry `Mcp-Method` / `Mcp-Name` (SEP-2243).
    pub(crate) const FIRST_WITH_HEADERS: Revision = Revision::V2026_07_28;

    /// The revision's date, as `MCP-Protocol-Version` carries it.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Revision::V2025_03_26 => "2025-03-26",
            Revision::V2025_11_25 => "2025-11-25",
            Revision::V2026_07_28 => "2026-07-28",
        }
    }
}

/// Whether a protocol version (a revision date, compared as text) is one whose requests must
/// carry the headers of [`Revision::FIRST_WITH_HEADERS`]; later, unknown dates count too.
pub fn is_header_revision(version: &str) -> bool {
    version >= Revision::FIRST_WITH_HEADERS.as_str()
}

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

    /// Whether `method` is under this category (`tools/` followed by anything).
    pub fn covers(self, method: &str) -> bool {
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
    /// The first revision that has the method.
    pub(crate) since: Revision,
    /// From [`Revision::FIRST_WITH_HEADERS`] on, the request must carry its param in `Mcp-Name`.
    pub(crate) name_header: bool,
}

const fn method(
    name: &'static str,
    category: Option<Category>,
    param: Option<Param>,
    base: bool,
    since: Revision,
    name_header: bool,
) -> Method {
    Method {
        name,
        category,
        param,
        base,
        since,
        name_header,
    }
}

use Category::{Prompts, Resources, Tools};
use Param::{Name, Uri};
use Revision::{V2025_03_26, V2025_11_25, V2026_07_28};

/// The methods, in the order rules list them in error messages. Notifications and the methods
/// under [`BASE_PREFIXES`] are covered by the prefixes, not listed.
pub(crate) const METHODS: &[Method] = &[
    method("tools/list", Some(Tools), None, true, V2025_03_26, false),
    method(
        "prompts/list",
        Some(Prompts),
        None,
        true,
        V2025_03_26,
        false,
    ),
    method(
        "resources/list",
        Some(Resources),
        None,
        true,
        V2025_03_26,
        false,
    ),
    method(
        "resources/templates/list",
        Some(Resources),
        None,
        true,
        V2025_03_26,
        false,
    ),
    method(
        "tools/call",
        Some(Tools),
        Some(Name),
        false,
        V2025_03_26,
        true,
    ),
    method(
        "prompts/get",
        Some(Prompts),
        Some(Name),
        false,
        V2025_03_26,
        true,
    ),
    method(
        "resources/read",
        Some(Resources),
        Some(Uri),
        false,
        V2025_03_26,
        true,
    ),
    method(
        "resources/subscribe",
        Some(Resources),
        Some(Uri),
        false,
        V2025_03_26,
        false,
    ),
    method(
        "resources/unsubscribe",
        Some(Resources),
        Some(Uri),
        false,
        V2025_03_26,
        false,
    ),
    method("initialize", None, None, true, V2025_03_26, false),
    method("ping", None, None, true, V2025_03_26, false),
    method("tasks/get", None, None, false, V2025_11_25, false),
    method("tasks/result", None, None, false, V2025_11_25, false),
    method("tasks/list", None, None, false, V2025_11_25, false),
    method("tasks/cancel", None, None, false, V2025_11_25, false),
    // Planned as base protocol (docs/semantics.md §4.4); until then only a rule without `mcp`
    // admits them.
    method("server/discover", None, None, false, V2026_07_28, false),
    method(
        "subscriptions/listen",
        None,
        None,
        false,
        V2026_07_28,
        false,
    ),
];

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
        ] {
            assert!(is_base(m), "{m}");
        }
        for m in [
            "tools/call",
            "prompts/get",
            "resources/read",
            "resources/subscribe",
            "tasks/get",
            "server/discover",
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
            let by_prefix = Category::ALL.into_iter().find(|c| c.covers(m.name));
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
        assert!(Category::Tools.covers("tools/anything"));
        assert!(!Category::Tools.covers("tools"));
        assert!(!Category::Tools.covers("toolsx/call"));
        assert!(!Category::Resources.covers("notifications/resources/updated"));
        assert_eq!(Category::named("prompts"), Some(Category::Prompts));
        assert_eq!(Category::named("prompts/get"), None);
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
