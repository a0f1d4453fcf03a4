//! Gateways: their listeners (protocol, port, allowed route kinds, bindings) and the TLS of
//! HTTPS listeners (certificates, client certificate validation).

use std::collections::{HashMap, HashSet};

use super::grants::permitted;
use super::{cond, is_core, opt, reason, seniority_order, status, Ctx};
use crate::load::Item;
use crate::model::*;
use crate::refs::{ObjectName, Target};
use crate::types::*;

/// Why something is not accepted: a status reason and a message.
type Problem = (&'static str, String);

/// The listeners bound so far: (port, hostname) -> owner, and port -> protocol.
#[derive(Default)]
struct Bindings {
    bound: HashMap<(u16, Option<String>), String>,
    port_proto: HashMap<u16, Protocol>,
}

impl Bindings {
    /// Claims `port` and `hostname` for `owner`, unless another listener has them or the
    /// port serves the other protocol.
    fn bind(
        &mut self,
        port: u16,
        proto: Protocol,
        hostname: &Option<String>,
        owner: String,
    ) -> Result<(), Problem> {
        match self.port_proto.get(&port) {
            Some(p) if *p != proto => {
                return Err((
                    reason::CONFLICTED,
                    format!("port {port} is already used by a listener of the other protocol"),
                ));
            }
            _ => {}
        }
        if let Some(owner) = self.bound.get(&(port, hostname.clone())) {
            return Err((
                reason::CONFLICTED,
                format!(
                    "port {port} and hostname {} are already used by {owner}",
                    hostname.as_deref().unwrap_or("(any)")
                ),
            ));
        }
        self.bound.insert((port, hostname.clone()), owner);
        self.port_proto.insert(port, proto);
        Ok(())
    }
}

impl Ctx<'_> {
    fn envoy_port(&self, ns: &str, gw: &str, listener: &str, port: i64) -> Option<u16> {
        for key in [
            format!("{ns}/{gw}/{listener}"),
            format!("{gw}/{listener}"),
            listener.to_string(),
        ] {
            if let Some(p) = self.o.listen.get(&key) {
                return Some(*p);
            }
        }
        u16::try_from(port + i64::from(self.o.port_offset))
            .ok()
            .filter(|p| *p != 0)
    }

    fn secret_known(&self, ns: &str, name: &str, list: &Option<Vec<String>>) -> bool {
        match list {
            None => true,
            Some(l) => l.iter().any(|k| k == name || *k == format!("{ns}/{name}")),
        }
    }

    pub(super) fn gateways(&mut self) {
        let order = seniority_order(&self.m.gateways);
        let mut seen: HashSet<String> = HashSet::new();
        let mut bindings = Bindings::default();
        for i in order {
            let Some(g) = self.m.gateways.get(i) else {
                continue;
            };
            let id = g.id();
            let first = seen.insert(id.clone());
            let (gateway_problem, addresses) = self.gateway_problem(g, first);
            if let Some(inf) = &g.spec.infrastructure {
                if inf.labels.is_some() || inf.annotations.is_some() {
                    self.report.warnings.push(format!("Gateway {id}: spec.infrastructure labels and annotations have no effect outside a cluster"));
                }
            }
            if let Some((r, msg)) = gateway_problem {
                let conds = vec![cond(ObjectName::new("Gateway", g.ns_name()), None, r, msg)];
                self.report.gateways.push(status(g, None, conds));
                continue;
            }
            let mut conds = Vec::new();
            let mut listeners = Vec::new();
            for l in g.spec.listeners.iter().flatten() {
                let target = Target::Listener(opt(&l.name).to_string());
                match self.listener(g, l, &mut bindings) {
                    Err((r, msg)) => conds.push(cond(target, None, r, msg)),
                    Ok(lm) => {
                        let msg = format!("Envoy listens on port {}", lm.port);
                        conds.push(cond(target, None, reason::ACCEPTED, msg));
                        listeners.push(lm);
                    }
                }
            }
            if !listeners.is_empty() {
                self.topo.gateways.push(GatewayModel {
                    namespace: g.meta.namespace.clone(),
                    name: g.meta.name.clone(),
                    addresses,
                    listeners,
                });
            }
            self.report.gateways.push(status(g, None, conds));
        }
    }

    /// What keeps a whole Gateway from being accepted (`first`: no Gateway of this
    /// namespace/name came before), beside its IP addresses.
    fn gateway_problem(
        &self,
        g: &Item<GatewaySpec>,
        first: bool,
    ) -> (Option<Problem>, Vec<String>) {
        let s = &g.spec;
        let class = opt(&s.gateway_class_name);
        let mut gateway_problem: Option<Problem> = None;
        if !first {
            gateway_problem = Some((
                reason::CONFLICTED,
                "another Gateway with this namespace/name is defined earlier or is older".into(),
            ));
        } else if !self.o.gateway_classes.is_empty()
            && !self.o.gateway_classes.iter().any(|c| c == class)
        {
            gateway_problem = Some((
                "NotReconciled",
                format!("gatewayClassName \"{class}\" is not one of --gateway-class"),
            ));
        } else if s
            .infrastructure
            .as_ref()
            .is_some_and(|x| x.parameters_ref.is_some())
        {
            gateway_problem = Some((
                "InvalidParameters",
                "spec.infrastructure.parametersRef is not supported".into(),
            ));
        } else if s
            .tls
            .as_ref()
            .and_then(|t| t.backend.as_ref())
            .is_some_and(|b| b.client_certificate_ref.is_some())
        {
            gateway_problem = Some((reason::UNSUPPORTED, "spec.tls.backend.clientCertificateRef (client certificates towards backends) is not supported".into()));
        }
        let mut addresses = Vec::new();
        for a in s.addresses.iter().flatten() {
            let kind = a.kind.as_deref().unwrap_or("IPAddress");
            if kind == "IPAddress" {
                addresses.push(opt(&a.value).to_string());
            } else if gateway_problem.is_none() {
                gateway_problem = Some((
                    "UnsupportedAddress",
                    format!("address type {kind} is not supported (only IPAddress)"),
                ));
            }
        }
        (gateway_problem, addresses)
    }

    /// One listener of an otherwise accepted Gateway, bound to its Envoy port.
    fn listener(
        &mut self,
        g: &Item<GatewaySpec>,
        l: &GatewayListener,
        bindings: &mut Bindings,
    ) -> Result<ListenerModel, Problem> {
        let id = g.id();
        let lname = opt(&l.name).to_string();
        let proto = match opt(&l.protocol) {
            "HTTP" => Protocol::Http,
            "HTTPS" => Protocol::Https,
            other => {
                return Err((
                    "UnsupportedProtocol",
                    format!("protocol {other} is not supported (HTTP and HTTPS are)"),
                ));
            }
        };
        let Some(port) = self.envoy_port(
            &g.meta.namespace,
            &g.meta.name,
            &lname,
            l.port.unwrap_or_default(),
        ) else {
            return Err((
                reason::INVALID,
                "port plus --port-offset is not a TCP port".into(),
            ));
        };
        // Routes: kinds.
        if let Some(kinds) = l.allowed_routes.as_ref().and_then(|a| a.kinds.as_ref()) {
            let http = kinds.iter().any(|k| {
                k.group.as_deref().unwrap_or(GATEWAY_GROUP) == GATEWAY_GROUP
                    && opt(&k.kind) == "HTTPRoute"
            });
            if !http {
                return Err((
                    "InvalidRouteKinds",
                    "allowedRoutes.kinds does not include HTTPRoute, the only route kind supported"
                        .into(),
                ));
            }
            if let Some(k) = kinds.iter().find(|k| opt(&k.kind) != "HTTPRoute") {
                self.report.warnings.push(format!("Gateway {id} listener {lname}: route kind {} is not supported; only HTTPRoutes attach", opt(&k.kind)));
            }
        }
        let tls = match proto {
            Protocol::Https => Some(self.listener_tls(g, l)?),
            Protocol::Http => None,
        };
        let hostname = l.hostname.clone();
        bindings.bind(
            port,
            proto,
            &hostname,
            format!("Gateway {id} listener {lname}"),
        )?;
        Ok(ListenerModel {
            name: lname,
            port,
            protocol: proto,
            hostname,
            tls,
            routes: Vec::new(),
        })
    }

    /// The TLS of an HTTPS listener: its certificates and client certificate validation.
    fn listener_tls(
        &mut self,
        g: &Item<GatewaySpec>,
        l: &GatewayListener,
    ) -> Result<TlsModel, Problem> {
        let tls = l.tls.clone().unwrap_or_default();
        if tls.options.as_ref().is_some_and(|o| !o.is_empty()) {
            return Err((reason::UNSUPPORTED, "tls.options are not supported".into()));
        }
        let mut certs = Vec::new();
        let mut bad = None;
        for r in tls.certificate_refs.iter().flatten() {
            let (ns, name) = gateway_ref(g, r);
            if !is_core(opt(&r.group)) || r.kind.as_deref().unwrap_or("Secret") != "Secret" {
                bad = Some((
                    "InvalidCertificateRef",
                    format!(
                        "certificateRef {}/{name} must be a core Secret",
                        opt(&r.kind)
                    ),
                ));
            } else if let Err(e) = self.gateway_may_refer(g, "Secret", &ns, name) {
                bad = Some(e);
            } else if !self.secret_known(&ns, name, &self.o.tls_secrets) {
                bad = Some(("InvalidCertificateRef", format!("Secret {ns}/{name} is not available here: pass --tls-cert {name}=<cert.pem>,<key.pem>")));
            }
            certs.push(format!("{ns}/{name}"));
        }
        if let Some(e) = bad {
            return Err(e);
        }
        let client_validation = self.client_validation(g, l)?;
        if client_validation.is_none() {
            self.report.warnings.push(format!("Gateway {} listener {}: no client certificate validation (spec.tls.frontend or --client-ca), so callers have no SPIFFE identity", g.id(), opt(&l.name)));
        }
        Ok(TlsModel {
            certificates: certs,
            client_validation,
        })
    }

    /// Client certificate validation of a listener: the Gateway's `spec.tls.frontend` for
    /// its port (or its default), else a default CA given with `--client-ca`.
    fn client_validation(
        &self,
        g: &Item<GatewaySpec>,
        l: &GatewayListener,
    ) -> Result<Option<ClientValidation>, Problem> {
        let frontend = g.spec.tls.as_ref().and_then(|t| t.frontend.as_ref());
        let per_port = frontend.and_then(|f| {
            f.per_port
                .iter()
                .flatten()
                .find(|p| p.port == l.port)
                .and_then(|p| p.tls.clone())
        });
        let validation = per_port
            .or_else(|| frontend.and_then(|f| f.default.clone()))
            .and_then(|t| t.validation);
        let Some(v) = validation else {
            return Ok(match &self.o.client_cas {
                Some(l) if l.iter().any(String::is_empty) => Some(ClientValidation {
                    ca_refs: vec![String::new()],
                    optional: false,
                }),
                _ => None,
            });
        };
        let mut refs = Vec::new();
        let mut bad = None;
        for r in v.ca_certificate_refs.iter().flatten() {
            let (ns, name) = gateway_ref(g, r);
            let kind = opt(&r.kind);
            if !is_core(opt(&r.group)) || !matches!(kind, "ConfigMap" | "Secret") {
                bad = Some((
                    "InvalidCACertificateRef",
                    format!("caCertificateRef {kind} {name} must be a core ConfigMap or Secret"),
                ));
            } else if let Err(e) = self.gateway_may_refer(g, kind, &ns, name) {
                bad = Some(e);
            } else if !self.secret_known(&ns, name, &self.o.client_cas) {
                bad = Some(("InvalidCACertificateRef", format!("{kind} {ns}/{name} is not available here: pass --client-ca {name}=<ca.pem>")));
            }
            refs.push(format!("{ns}/{name}"));
        }
        match bad {
            Some(e) => Err(e),
            None => Ok(Some(ClientValidation {
                ca_refs: refs,
                optional: v.mode.as_deref() == Some("AllowInsecureFallback"),
            })),
        }
    }

    /// Whether a ReferenceGrant lets Gateway `g` refer to the core object `kind` `ns/name`.
    fn gateway_may_refer(
        &self,
        g: &Item<GatewaySpec>,
        kind: &str,
        ns: &str,
        name: &str,
    ) -> Result<(), Problem> {
        let from = &g.meta.namespace;
        if permitted(
            self.m,
            (GATEWAY_GROUP, "Gateway", from),
            ("", kind, ns, name),
        ) {
            return Ok(());
        }
        Err((reason::REF_NOT_PERMITTED, format!("no ReferenceGrant in namespace {ns} allows Gateways from {from} to refer to {kind} {name}")))
    }
}

/// The namespace (the Gateway's by default) and name of a Gateway's object reference.
fn gateway_ref<'r>(g: &Item<GatewaySpec>, r: &'r ObjectRef) -> (String, &'r str) {
    let ns = r
        .namespace
        .clone()
        .unwrap_or_else(|| g.meta.namespace.clone());
    (ns, opt(&r.name))
}
