//! What the host knows about a request beyond its headers: the facts ([`Fact`]) and the
//! port the host implements to give them ([`HostFacts`]).

/// A fact about the request that the host holds, named by its Envoy attribute.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Fact {
    /// `xds.route_name`: the route Envoy picked (text).
    RouteName,
    /// `xds.cluster_name`: the upstream cluster (text; about 13k instructions in Envoy).
    ClusterName,
    /// `destination.port`: the port the request arrived on (a 64-bit integer).
    DestinationPort,
    /// `connection.uri_san_peer_certificate`: the first URI SAN of the peer certificate.
    PeerUriSan,
    /// `connection.peer_certificate`: the peer certificate (PEM, maybe percent-encoded).
    PeerCertificate,
    /// `metadata`: the request's dynamic metadata (a serialized `envoy.config.core.v3.Metadata`).
    Metadata,
    /// `source.address` (`ip:port`).
    SourceAddress,
    /// `destination.address` (`ip:port`).
    DestinationAddress,
    /// `connection.dns_san_peer_certificate`: the first DNS SAN of the peer certificate.
    PeerDnsSan,
    /// `connection.subject_peer_certificate`.
    PeerSubject,
    /// `connection.uri_san_local_certificate`.
    LocalUriSan,
    /// `connection.dns_san_local_certificate`.
    LocalDnsSan,
    /// `connection.subject_local_certificate`.
    LocalSubject,
    /// `request.time`: when the first byte arrived (ns since the epoch, a 64-bit integer).
    RequestTime,
    /// `request.protocol` (`HTTP/1.1`, `HTTP/2`, ...).
    RequestProtocol,
    /// `connection.tls_version`: set only on a TLS connection.
    TlsVersion,
    /// `connection.mtls`: whether the client presented a certificate (a boolean).
    Mtls,
}

impl Fact {
    /// The Envoy attribute path of the fact.
    pub const fn path(self) -> &'static [&'static str] {
        match self {
            Fact::RouteName => &["xds", "route_name"],
            Fact::ClusterName => &["xds", "cluster_name"],
            Fact::DestinationPort => &["destination", "port"],
            Fact::PeerUriSan => &["connection", "uri_san_peer_certificate"],
            Fact::PeerCertificate => &["connection", "peer_certificate"],
            Fact::Metadata => &["metadata"],
            Fact::SourceAddress => &["source", "address"],
            Fact::DestinationAddress => &["destination", "address"],
            Fact::PeerDnsSan => &["connection", "dns_san_peer_certificate"],
            Fact::PeerSubject => &["connection", "subject_peer_certificate"],
            Fact::LocalUriSan => &["connection", "uri_san_local_certificate"],
            Fact::LocalDnsSan => &["connection", "dns_san_local_certificate"],
            Fact::LocalSubject => &["connection", "subject_local_certificate"],
            Fact::RequestTime => &["request", "time"],
            Fact::RequestProtocol => &["request", "protocol"],
            Fact::TlsVersion => &["connection", "tls_version"],
            Fact::Mtls => &["connection", "mtls"],
        }
    }
}

/// The host's side: the raw bytes of a fact, None when the host has none (or they are empty).
pub trait HostFacts {
    fn read(&self, fact: Fact) -> Option<Vec<u8>>;

    /// The host's clock now (ns since the Unix epoch), when reading it is cheaper than
    /// [`Fact::RequestTime`]; None: that fact is read instead.
    fn clock_ns(&self) -> Option<i64> {
        None
    }
}

#[cfg(test)]
pub(crate) mod fake {
    use super::*;

    /// Header pairs from `(name, value)` literals.
    pub(crate) fn headers(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs.iter().map(|&(n, v)| (n.into(), v.into())).collect()
    }

    /// Facts in memory, recording which were read.
    #[derive(Debug, Default)]
    pub(crate) struct FakeFacts {
        facts: Vec<(Fact, Vec<u8>)>,
        read: std::cell::RefCell<Vec<Fact>>,
        clock: Option<i64>,
    }

    impl FakeFacts {
        /// With `fact` set to `value`.
        pub(crate) fn with(mut self, fact: Fact, value: impl Into<Vec<u8>>) -> Self {
            self.facts.push((fact, value.into()));
            self
        }

        /// With a clock that reads `ns`.
        pub(crate) fn with_clock(mut self, ns: i64) -> Self {
            self.clock = Some(ns);
            self
        }

        /// The facts read so far, in order.
        pub(crate) fn reads(&self) -> Vec<Fact> {
            self.read.borrow().clone()
        }
    }

    impl HostFacts for FakeFacts {
        fn read(&self, fact: Fact) -> Option<Vec<u8>> {
            self.read.borrow_mut().push(fact);
            self.facts
                .iter()
                .find(|(f, _)| *f == fact)
                .map(|(_, v)| v.clone())
                .filter(|v| !v.is_empty())
        }

        fn clock_ns(&self) -> Option<i64> {
            self.clock
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fact_paths_are_envoy_attributes() {
        assert_eq!(Fact::RouteName.path(), ["xds", "route_name"]);
        assert_eq!(Fact::ClusterName.path(), ["xds", "cluster_name"]);
        assert_eq!(Fact::DestinationPort.path(), ["destination", "port"]);
        assert_eq!(
            Fact::PeerUriSan.path(),
            ["connection", "uri_san_peer_certificate"]
        );
        assert_eq!(
            Fact::PeerCertificate.path(),
            ["connection", "peer_certificate"]
        );
        assert_eq!(Fact::Metadata.path(), ["metadata"]);
        assert_eq!(Fact::RequestTime.path(), ["request", "time"]);
    }
}
