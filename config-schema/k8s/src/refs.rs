//! Typed names of Kubernetes objects: `namespace/name` ([`NsName`]), `Kind namespace/name`
//! ([`ObjectName`]) and what a status condition is about ([`Target`]). They print (and
//! serialize) as the report's texts; the compiler reads their fields, never parses the text.

use std::cmp::Ordering;
use std::fmt;

use serde::{Serialize, Serializer};

/// An object's `namespace/name`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct NsName {
    pub namespace: String,
    pub name: String,
}

impl NsName {
    pub fn new(namespace: impl Into<String>, name: impl Into<String>) -> NsName {
        NsName {
            namespace: namespace.into(),
            name: name.into(),
        }
    }

    /// Whether `text` is this object's `namespace/name`.
    pub fn is(&self, text: &str) -> bool {
        is_ns_name(text, &self.namespace, &self.name)
    }

    fn text(&self) -> impl Iterator<Item = u8> + '_ {
        let slash = std::iter::once(b'/');
        self.namespace.bytes().chain(slash).chain(self.name.bytes())
    }
}

/// Whether `text` is `ns/name`.
pub(crate) fn is_ns_name(text: &str, ns: &str, name: &str) -> bool {
    text.strip_prefix(ns)
        .and_then(|rest| rest.strip_prefix('/'))
        .is_some_and(|rest| rest == name)
}

impl fmt::Display for NsName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// Ordered as its `namespace/name` text, so that maps keyed by it list objects in the order
/// the report always has; equal texts (a `/` in a namespace) by namespace.
impl Ord for NsName {
    fn cmp(&self, other: &Self) -> Ordering {
        self.text()
            .cmp(other.text())
            .then_with(|| self.namespace.cmp(&other.namespace))
    }
}

impl PartialOrd for NsName {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Serialize for NsName {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// An object of a kind: `Kind namespace/name`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ObjectName {
    pub kind: String,
    pub id: NsName,
}

impl ObjectName {
    pub fn new(kind: impl Into<String>, id: NsName) -> ObjectName {
        ObjectName {
            kind: kind.into(),
            id,
        }
    }

    fn text(&self) -> impl Iterator<Item = u8> + '_ {
        let space = std::iter::once(b' ');
        self.kind.bytes().chain(space).chain(self.id.text())
    }
}

/// Ordered as its `Kind namespace/name` text (see [`NsName`]'s order).
impl Ord for ObjectName {
    fn cmp(&self, other: &Self) -> Ordering {
        self.text()
            .cmp(other.text())
            .then_with(|| self.kind.cmp(&other.kind))
            .then_with(|| self.id.cmp(&other.id))
    }
}

impl PartialOrd for ObjectName {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl fmt::Display for ObjectName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.kind, self.id)
    }
}

impl Serialize for ObjectName {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// What a status condition is about: an object (a policy's target, a route's parent, the
/// object itself), or a listener of the Gateway the status is of. Prints `Kind ns/name` or
/// `listener name`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Target {
    Object(ObjectName),
    Listener(String),
}

impl Target {
    pub fn object(&self) -> Option<&ObjectName> {
        match self {
            Target::Object(o) => Some(o),
            Target::Listener(_) => None,
        }
    }

    pub fn listener(&self) -> Option<&str> {
        match self {
            Target::Listener(l) => Some(l),
            Target::Object(_) => None,
        }
    }
}

impl From<ObjectName> for Target {
    fn from(o: ObjectName) -> Target {
        Target::Object(o)
    }
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Target::Object(o) => o.fmt(f),
            Target::Listener(l) => write!(f, "listener {l}"),
        }
    }
}

impl Serialize for Target {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// Compares the printed text (`target == "Gateway ns/gw"`).
impl PartialEq<str> for Target {
    fn eq(&self, other: &str) -> bool {
        match self {
            Target::Object(o) => other
                .strip_prefix(o.kind.as_str())
                .and_then(|rest| rest.strip_prefix(' '))
                .is_some_and(|rest| o.id.is(rest)),
            Target::Listener(l) => other.strip_prefix("listener ") == Some(l.as_str()),
        }
    }
}

impl PartialEq<&str> for Target {
    fn eq(&self, other: &&str) -> bool {
        *self == **other
    }
}

impl crate::types::TargetRef {
    /// `Kind namespace/name` of a policy target, in the policy's namespace `ns`.
    pub(crate) fn object_name(&self, ns: &str) -> ObjectName {
        use crate::types::opt;
        ObjectName::new(opt(&self.kind), NsName::new(ns, opt(&self.name)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn texts_are_the_reports() {
        let gw = ObjectName::new("Gateway", NsName::new("agents", "gw"));
        assert_eq!(gw.to_string(), "Gateway agents/gw");
        assert_eq!(Target::from(gw.clone()), "Gateway agents/gw");
        assert_ne!(Target::from(gw), "Gateway agents/g");
        let l = Target::Listener("https".into());
        assert_eq!(l.to_string(), "listener https");
        assert_eq!(l, "listener https");
        assert_eq!(
            serde_json::to_string(&l).unwrap_or_default(),
            "\"listener https\""
        );
    }

    #[test]
    fn ns_names_sort_as_their_text() {
        let mut v = [
            NsName::new("a", "x"),
            NsName::new("a-b", "x"),
            NsName::new("a", ""),
        ];
        let mut texts: Vec<String> = v.iter().map(ToString::to_string).collect();
        v.sort();
        texts.sort();
        let sorted: Vec<String> = v.iter().map(ToString::to_string).collect();
        assert_eq!(sorted, texts);
        // A `/` in a namespace: same text, still two objects.
        let (p, q) = (NsName::new("a/b", "c"), NsName::new("a", "b/c"));
        assert_ne!(p.cmp(&q), Ordering::Equal);
        assert!(!NsName::new("a", "b/c").is("a/b"));
        assert!(NsName::new("a", "b").is("a/b"));
    }
}
