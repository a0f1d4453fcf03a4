//! The headers stage's input: the request headers and the host facts the decision needs,
//! each read only when it does (some cost the host real work).

use mcp_access_bundle::AuthorizerProtocol;

use crate::facts::{Fact, HostFacts};
use crate::identity;
use crate::policy::Engine;
use crate::request::{Caller, Headers, Peers};

/// Headers-stage facts the host collected.
#[derive(Debug, Clone, Default)]
pub struct HeadersInput {
    /// All request headers, names lowercase, pseudo-headers included.
    pub headers: Headers,
    pub end_of_stream: bool,
    /// `request.time` in nanoseconds since the Unix epoch, when a CEL condition reads it.
    pub time: Option<i64>,
    pub port: u16,
    pub route_name: Option<String>,
    pub cluster_name: Option<String>,
    pub caller: Caller,
    /// Connection facts for gRPC authorizers (read only when the bundle has one).
    pub peers: Option<Peers>,
}

/// A fact as non-empty UTF-8 text.
fn text(facts: &dyn HostFacts, fact: Fact) -> Option<String> {
    facts
        .read(fact)
        .and_then(|b| String::from_utf8(b).ok())
        .filter(|s| !s.is_empty())
}

impl HeadersInput {
    /// Everything the headers stage needs: `headers` (names lowercase, pseudo-headers included)
    /// and the facts that decide listener, backend and caller. The backend is found by route
    /// name first; the upstream cluster is only read when the route name does not decide.
    pub fn gather(
        engine: &Engine,
        headers: Headers,
        end_of_stream: bool,
        facts: &dyn HostFacts,
    ) -> HeadersInput {
        let grpc = engine
            .authorizers
            .iter()
            .any(|a| a.protocol == AuthorizerProtocol::Grpc);
        // The listener this copy of the bundle serves, when the renderer wrote it: its port is
        // every request's, and without TLS no request has a peer certificate.
        let served = engine.settings.served_listener;
        let tls = served.is_none_or(|l| l.tls);
        // gRPC authorizers are told `destination.address` (`ip:port`): its port spares a read
        // (`destination.port` only when the address has none).
        let destination = grpc
            .then(|| text(facts, Fact::DestinationAddress))
            .flatten();
        let port = served
            .map(|l| l.port)
            .or_else(|| destination.as_deref().and_then(address_port))
            .or_else(|| {
                facts
                    .read(Fact::DestinationPort)
                    .and_then(|b| crate::wire::decode_i64(&b))
                    .and_then(|p| u16::try_from(p).ok())
            })
            .unwrap_or(0);
        let route_name = text(facts, Fact::RouteName);
        let cluster_name = if engine.backend_for(route_name.as_deref(), None).is_some() {
            None
        } else {
            text(facts, Fact::ClusterName)
        };
        // CEL's `request.time` is Envoy's attribute; a gRPC authorizer is told the host's clock
        // at the headers when reading it is cheaper (one read serves both when CEL reads it).
        let request_time = || {
            facts
                .read(Fact::RequestTime)
                .and_then(|b| crate::wire::decode_i64(&b))
        };
        let time = engine.cel_needs().time.then(request_time).flatten();
        let grpc_time = match (grpc, time) {
            (false, _) => None,
            (true, Some(t)) => Some(t),
            (true, None) => facts.clock_ns().or_else(request_time),
        };
        let mut caller = identity::caller(
            &engine.settings.identity,
            engine.wanted(),
            &headers,
            facts,
            tls,
        );
        if engine.challenges() && caller.anonymous() {
            caller.credential =
                identity::other_credential(&engine.settings.identity, &headers, facts, tls);
        }
        HeadersInput {
            peers: grpc.then(|| peers(engine, &headers, facts, tls, grpc_time, destination)),
            caller,
            headers,
            end_of_stream,
            time,
            port,
            route_name,
            cluster_name,
        }
    }
}

/// What gRPC authorizers are told about the connection, as Envoy's ext_authz tells it (the
/// scheme from the `:scheme` pseudo-header): a principal is the certificate's first URI SAN, else its first DNS SAN, else its subject.
fn peers(
    engine: &Engine,
    headers: &Headers,
    facts: &dyn HostFacts,
    tls: bool,
    time_ns: Option<i64>,
    destination_address: Option<String>,
) -> Peers {
    // Certificates exist only on a TLS connection: one read spares six on plaintext (none on
    // a listener known to have no TLS).
    let tls = tls && text(facts, Fact::TlsVersion).is_some();
    let principal = |uri, dns, subject| {
        if !tls {
            return None;
        }
        text(facts, uri)
            .or_else(|| text(facts, dns))
            .or_else(|| text(facts, subject))
    };
    let certificate = engine
        .authorizers
        .iter()
        .any(|a| a.include_peer_certificate && tls)
        .then(|| text(facts, Fact::PeerCertificate))
        .flatten()
        .map(|pem| url_encode(&pem));
    Peers {
        source_address: text(facts, Fact::SourceAddress),
        source_principal: principal(Fact::PeerUriSan, Fact::PeerDnsSan, Fact::PeerSubject),
        source_certificate: certificate,
        destination_address,
        destination_principal: principal(Fact::LocalUriSan, Fact::LocalDnsSan, Fact::LocalSubject),
        time_ns,
        protocol: text(facts, Fact::RequestProtocol),
        scheme: headers.get(":scheme").map(str::to_owned),
    }
}

/// The port of an `ip:port` (`[v6]:port`) address; None for one without (a pipe's path).
fn address_port(address: &str) -> Option<u16> {
    address.rsplit_once(':')?.1.parse().ok()
}

/// A PEM as Envoy's `urlEncodedPemEncodedPeerCertificate` gives it (already-encoded text is kept).
fn url_encode(pem: &str) -> String {
    if !pem.contains("-----BEGIN") {
        return pem.to_string();
    }
    let mut out = String::with_capacity(pem.len() * 2);
    for b in pem.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::facts::fake::FakeFacts;
    use crate::flow::{Phase, Verdict};

    fn engine(extra: serde_json::Value) -> Engine {
        let mut b = serde_json::json!({
            "apiVersion": "mcp-access.io/v1",
            "gateways": [{"name": "gw", "listeners": [{"name": "https", "port": 8443}]}],
            "backends": [
                {"name": "tools", "routeNames": ["tools-route"]},
                {"name": "other", "clusterNames": ["other-cluster"]}
            ],
        });
        if let (Some(b), Some(extra)) = (b.as_object_mut(), extra.as_object()) {
            b.extend(extra.clone());
        }
        Engine::from_json(b.to_string().as_bytes()).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn the_cluster_is_read_only_when_the_route_name_does_not_decide() {
        let e = engine(serde_json::json!({}));
        let known = FakeFacts::default()
            .with(Fact::RouteName, "tools-route")
            .with(Fact::ClusterName, "other-cluster")
            .with(Fact::DestinationPort, 8443i64.to_le_bytes());
        let input = HeadersInput::gather(&e, Headers::new(), true, &known);
        assert_eq!(input.route_name.as_deref(), Some("tools-route"));
        assert_eq!(input.cluster_name, None);
        assert_eq!(input.port, 8443);
        assert!(!known.reads().contains(&Fact::ClusterName));

        let unknown = FakeFacts::default()
            .with(Fact::RouteName, "some-route")
            .with(Fact::ClusterName, "other-cluster");
        let input = HeadersInput::gather(&e, Headers::new(), false, &unknown);
        assert_eq!(input.cluster_name.as_deref(), Some("other-cluster"));
        assert_eq!(
            e.backend_for(input.route_name.as_deref(), input.cluster_name.as_deref()),
            Some(1)
        );
        assert!(!input.end_of_stream);
        // No port, or one that is no u16: port 0, which no listener has.
        assert_eq!(input.port, 0);
        let odd = FakeFacts::default().with(Fact::DestinationPort, 70_000i64.to_le_bytes());
        assert_eq!(HeadersInput::gather(&e, Headers::new(), true, &odd).port, 0);
        let short = FakeFacts::default().with(Fact::DestinationPort, [1u8, 2]);
        assert_eq!(
            HeadersInput::gather(&e, Headers::new(), true, &short).port,
            0
        );
        // An empty or non-UTF-8 name is no name.
        let bad = FakeFacts::default()
            .with(Fact::RouteName, b"\xff".to_vec())
            .with(Fact::ClusterName, "");
        let input = HeadersInput::gather(&e, Headers::new(), true, &bad);
        assert_eq!((input.route_name, input.cluster_name), (None, None));
    }

    #[test]
    fn with_a_grpc_authorizer_the_port_comes_from_the_destination_address() {
        let e = engine(serde_json::json!({"authorizers": [
            {"name": "a", "cluster": "c", "protocol": "GRPC"}]}));
        for (address, port, read) in [
            ("10.0.0.1:8443", 8443, false),
            ("[::1]:8443", 8443, false),
            // No port in the address: `destination.port` as without a gRPC authorizer.
            ("/tmp/pipe", 9999, true),
            ("10.0.0.1:70000", 9999, true),
        ] {
            let f = FakeFacts::default()
                .with(Fact::DestinationAddress, address)
                .with(Fact::DestinationPort, 9999i64.to_le_bytes());
            let input = HeadersInput::gather(&e, Headers::new(), true, &f);
            assert_eq!(input.port, port, "{address}");
            assert_eq!(f.reads().contains(&Fact::DestinationPort), read);
            assert_eq!(
                input.peers.and_then(|p| p.destination_address).as_deref(),
                Some(address)
            );
        }
        // No address: `destination.port`; neither: port 0, which no listener has.
        let f = FakeFacts::default().with(Fact::DestinationPort, 8443i64.to_le_bytes());
        assert_eq!(
            HeadersInput::gather(&e, Headers::new(), true, &f).port,
            8443
        );
        let none = FakeFacts::default();
        assert_eq!(
            HeadersInput::gather(&e, Headers::new(), true, &none).port,
            0
        );
    }

    #[test]
    fn request_time_and_the_jwt_payload_are_read_only_for_cel_that_uses_them() {
        let facts = || {
            FakeFacts::default()
                .with(Fact::RouteName, "tools-route")
                .with(
                    Fact::RequestTime,
                    1_767_323_045_000_000_000i64.to_le_bytes(),
                )
        };
        let plain = engine(serde_json::json!({}));
        let f = facts();
        assert_eq!(
            HeadersInput::gather(&plain, Headers::new(), true, &f).time,
            None
        );
        assert!(!f.reads().contains(&Fact::RequestTime));
        let timed = engine(
            serde_json::json!({"policies": [{"name": "p", "level": "Backend",
            "targets": [{"name": "tools"}], "action": "Deny",
            "when": ["request.time.getHours() == 3 && jwt.claims.sub == 'x'"]}]}),
        );
        assert!(timed.cel_needs().time && timed.cel_needs().jwt_payload);
        assert!(!timed.cel_needs().params);
        let f = facts();
        assert_eq!(
            HeadersInput::gather(&timed, Headers::new(), true, &f).time,
            Some(1_767_323_045_000_000_000)
        );
    }

    #[test]
    fn a_grpc_authorizer_is_told_the_clock_unless_cel_reads_request_time() {
        let at = 1_767_323_045_000_000_000i64;
        let facts = || {
            FakeFacts::default()
                .with(Fact::RequestTime, at.to_le_bytes())
                .with_clock(at + 5)
        };
        let grpc = serde_json::json!([{"name": "a", "cluster": "c", "protocol": "GRPC"}]);
        let e = engine(serde_json::json!({"authorizers": grpc}));
        let f = facts();
        let input = HeadersInput::gather(&e, Headers::new(), true, &f);
        assert_eq!(input.peers.and_then(|p| p.time_ns), Some(at + 5));
        assert_eq!(input.time, None);
        assert!(!f.reads().contains(&Fact::RequestTime));
        // A host without a cheaper clock: `request.time`.
        let f = FakeFacts::default().with(Fact::RequestTime, at.to_le_bytes());
        let input = HeadersInput::gather(&e, Headers::new(), true, &f);
        assert_eq!(input.peers.and_then(|p| p.time_ns), Some(at));
        // CEL reads `request.time`: that one read serves the authorizer too.
        let timed = engine(
            serde_json::json!({"authorizers": grpc, "policies": [{"name": "p",
            "level": "Backend", "targets": [{"name": "tools"}], "action": "Deny",
            "when": ["request.time.getHours() == 3"]}]}),
        );
        let f = facts();
        let input = HeadersInput::gather(&timed, Headers::new(), true, &f);
        assert_eq!(input.peers.and_then(|p| p.time_ns), Some(at));
        assert_eq!(input.time, Some(at));
        assert_eq!(
            f.reads()
                .iter()
                .filter(|r| **r == Fact::RequestTime)
                .count(),
            1
        );
    }

    #[test]
    fn a_served_listener_spares_the_port_and_on_plain_http_the_certificate() {
        let facts = || {
            FakeFacts::default()
                .with(Fact::DestinationPort, 9999i64.to_le_bytes())
                .with(Fact::PeerUriSan, "spiffe://example.org/a")
                .with(Fact::Mtls, [1u8])
                .with(Fact::TlsVersion, "TLSv1.3")
        };
        let grpc = serde_json::json!([{"name": "a", "cluster": "c", "protocol": "GRPC"}]);
        for tls in [false, true] {
            let served = serde_json::json!({"listener": {"port": 8443, "tls": tls}});
            let e = engine(serde_json::json!({"envoy": served, "authorizers": grpc}));
            let f = facts();
            let input = HeadersInput::gather(&e, Headers::new(), true, &f);
            assert_eq!(input.port, 8443);
            let reads = f.reads();
            assert!(!reads.contains(&Fact::DestinationPort));
            for fact in [Fact::PeerUriSan, Fact::TlsVersion] {
                assert_eq!(reads.contains(&fact), tls, "{fact:?} tls {tls}");
            }
        }
        // Absent: the port is Envoy's, the certificate read.
        let e = engine(serde_json::json!({}));
        let f = facts();
        assert_eq!(
            HeadersInput::gather(&e, Headers::new(), true, &f).port,
            9999
        );
        assert!(f.reads().contains(&Fact::PeerUriSan));
        // A port no listener has is refused at load, naming the field.
        let b = serde_json::json!({"apiVersion": "mcp-access.io/v1",
            "gateways": [{"name": "gw", "listeners": [{"name": "https", "port": 8443}]}],
            "envoy": {"listener": {"port": 8080, "tls": false}}});
        let err = Engine::from_json(b.to_string().as_bytes())
            .err()
            .map(|e| e.to_string());
        assert!(
            err.as_deref()
                .is_some_and(|e| e.contains("envoy.listener.port")),
            "{err:?}"
        );
    }

    #[test]
    fn headers_are_held_only_where_envoy_allows_it() {
        let body = Phase::Headers { body_follows: true };
        let no_body = Phase::Headers {
            body_follows: false,
        };
        assert_eq!(body.hold(true), Verdict::Pause);
        assert_eq!(body.hold(false), Verdict::Continue);
        for hold_headers in [true, false] {
            assert_eq!(no_body.hold(hold_headers), Verdict::Pause);
            assert_eq!(Phase::Body.hold(hold_headers), Verdict::Pause);
            assert_eq!(Phase::Async.hold(hold_headers), Verdict::Pause);
        }
        assert!(Phase::Async.resumes_on_allow());
        assert!(!Phase::Body.resumes_on_allow() && !body.resumes_on_allow());
        // The bundle's envoy.holdHeaders reaches the engine (default: true).
        assert!(engine(serde_json::json!({})).settings.hold_headers);
        let off = engine(serde_json::json!({"envoy": {"holdHeaders": false}}));
        assert!(!off.settings.hold_headers);
    }
}
