//! Bootstrap from DNS SRV records (`--discovery-srv`, `--discovery-srv-name`), as etcd's
//! `srv.GetCluster` and `embed.Config.PeerURLsMapAndToken` do it.
//!
//! This module owns the SRV lookups of `_etcd-server-ssl._tcp.<domain>` (https) and
//! `_etcd-server._tcp.<domain>` (http), with `-<srv-name>` appended to both services
//! when `--discovery-srv-name` is set; finding this member among the targets by
//! resolved address (it gets `--name`, the others etcd's placeholder names "0", "1",
//! ...); and etcd's messages when that fails. As etcd 3.5 and later, the members of both
//! services are combined and discovery fails only when neither gives one (etcd 3.4
//! drops the http members whenever the https lookup fails). The result replaces
//! `--initial-cluster` for the rest of the start (`join`, the raft bootstrap); when
//! this member's `--initial-advertise-peer-urls` only resolve to its SRV targets'
//! addresses, its SRV URLs replace them, as an etcd member takes its peer URLs from
//! the cluster.
//!
//! It runs once, in the start path, for a member with no data yet (a member that has
//! data ignores the bootstrap flags, as etcd does). It never looks DNS up again: peers
//! resolve host names each time they dial. It never changes a running membership, and
//! it never runs inside the config parser, which must not resolve names.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::net::SocketAddr;

use hickory_resolver::net::{DnsError, NetError};
use hickory_resolver::proto::rr::RData;
use hickory_resolver::TokioResolver;

use super::{join, MembershipError};
use crate::config::{ClusterMember, Config};

/// One SRV answer.
#[derive(Clone, Debug, PartialEq, Eq)]
struct SrvRecord {
    /// As DNS gives it, usually with a trailing dot.
    target: String,
    port: u16,
    priority: u16,
}

/// What discovery asks of DNS (a seam, so that the rules are tested without a server).
trait Lookups {
    /// The SRV records of `name`, or Go's `net.LookupSRV` error text.
    async fn srv(&self, name: &str) -> Result<Vec<SrvRecord>, String>;
    /// The address a dialer would reach `host:port` at (the first IPv4 one, as Go's
    /// `net.ResolveTCPAddr` picks), or why there is none.
    async fn resolve(&self, host_port: &str) -> Result<SocketAddr, String>;
}

/// The start configuration: `config` itself, or, for a member with no data that was
/// started with `--discovery-srv`, a copy with the initial cluster from DNS.
pub async fn bootstrap_config(
    config: &Config,
    has_data: bool,
) -> Result<Cow<'_, Config>, MembershipError> {
    let Some(domain) = config.discovery_srv.as_deref() else {
        return Ok(Cow::Borrowed(config));
    };
    if has_data && matches!(join::read_identity(&config.data_dir), Ok(Some(_))) {
        tracing::info!(
            discovery_srv = domain,
            "the data dir has a member: --discovery-srv is not looked up"
        );
        return Ok(Cow::Borrowed(config));
    }
    let (initial_cluster, advertised) = discover(&SystemDns::new(), config, domain).await?;
    let mut discovered = config.clone();
    discovered.initial_cluster = initial_cluster;
    discovered.initial_advertise_peer_urls = advertised;
    Ok(Cow::Owned(discovered))
}

/// A member etcd's `GetCluster` found, with the address it resolved to.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Found {
    name: String,
    url: String,
    addr: SocketAddr,
}

/// etcd's `PeerURLsMapAndToken` for `--discovery-srv`: the initial cluster, and this
/// member's peer URLs in it.
async fn discover<L: Lookups>(
    dns: &L,
    config: &Config,
    domain: &str,
) -> Result<(Vec<ClusterMember>, Vec<String>), MembershipError> {
    let failed = |reason: String| {
        MembershipError::Bootstrap(format!("error setting up initial cluster: {reason}"))
    };
    let suffix = config
        .discovery_srv_name
        .as_ref()
        .map_or(String::new(), |name| format!("-{name}"));

    // etcd resolves the advertised peer URLs first, and gives up if one does not resolve.
    let mut own: Vec<(SocketAddr, &str)> = Vec::new();
    for url in &config.initial_advertise_peer_urls {
        let addr = dns.resolve(host_port(url)).await.map_err(&failed)?;
        own.push((addr, url.as_str()));
    }

    let mut found = Vec::new();
    let mut errors = Vec::new();
    for (scheme, service) in [
        ("https", format!("etcd-server-ssl{suffix}")),
        ("http", format!("etcd-server{suffix}")),
    ] {
        let result = get_cluster(dns, scheme, &service, &config.name, domain, &own).await;
        let nodes: Vec<String> = result.iter().flatten().map(node).collect();
        tracing::info!(
            service_scheme = scheme,
            service_name = %service,
            discovery_srv = domain,
            found = ?nodes,
            error = result.as_ref().err().map(String::as_str).unwrap_or(""),
            "get cluster for {service} SRV"
        );
        match result {
            Ok(members) => found.extend(members),
            Err(error) => errors.push(error),
        }
    }
    if !errors.is_empty() {
        tracing::warn!(error = %errors.join("\n"), "failed to resolve during SRV discovery");
    }
    if found.is_empty() {
        return Err(failed(errors.join("\n")));
    }
    for member in &found {
        tracing::info!(node = %node(member), "got bootstrap from DNS for etcd-server");
    }

    let mut by_name: BTreeMap<&str, Vec<&Found>> = BTreeMap::new();
    for member in &found {
        by_name.entry(&member.name).or_default().push(member);
    }
    let Some(local) = by_name.get(config.name.as_str()) else {
        return Err(failed(format!(
            "cannot find local etcd member {:?} in SRV records",
            config.name
        )));
    };
    if let Some(tls) = found.iter().find(|m| m.url.starts_with("https://")) {
        return Err(failed(format!(
            "{} from DNS SRV records uses TLS, which QuantyKube does not implement yet",
            tls.url
        )));
    }

    // etcd compares the advertised URLs with the cluster's after resolving both; where
    // they resolve alike, the cluster's URLs are the member's.
    let mut advertised_addrs: Vec<SocketAddr> = own.iter().map(|(addr, _)| *addr).collect();
    let mut local_addrs: Vec<SocketAddr> = local.iter().map(|m| m.addr).collect();
    advertised_addrs.sort();
    local_addrs.sort();
    let mut local_urls: Vec<String> = local.iter().map(|m| m.url.clone()).collect();
    local_urls.sort();
    let advertised = if advertised_addrs == local_addrs {
        local_urls
    } else {
        // `verify_bootstrap` names the mismatch, with etcd's message.
        config.initial_advertise_peer_urls.clone()
    };

    let cluster = by_name
        .into_iter()
        .map(|(name, members)| {
            let mut peer_urls: Vec<String> = members.iter().map(|m| m.url.clone()).collect();
            peer_urls.sort();
            peer_urls.dedup();
            ClusterMember {
                name: name.to_string(),
                peer_urls,
            }
        })
        .collect();
    Ok((cluster, advertised))
}

/// etcd's `srv.GetCluster` for one service: every SRV target that resolves, named
/// `name` when it resolves to one of this member's advertised peer URLs (`own`) and a
/// placeholder otherwise.
async fn get_cluster<L: Lookups>(
    dns: &L,
    scheme: &str,
    service: &str,
    name: &str,
    domain: &str,
    own: &[(SocketAddr, &str)],
) -> Result<Vec<Found>, String> {
    let failed = |reason: String| format!("error querying DNS SRV records for _{service} {reason}");
    let mut records = dns
        .srv(&format!("_{service}._tcp.{domain}"))
        .await
        .map_err(failed)?;
    // Go's LookupSRV sorts by priority (and shuffles by weight within one).
    records.sort_by_key(|r| r.priority);

    let mut temp_name = 0;
    let mut found = Vec::new();
    let mut last_error = String::new();
    for record in records {
        let addr = match dns
            .resolve(&join_host_port(&record.target, record.port))
            .await
        {
            Ok(addr) => addr,
            Err(error) => {
                last_error = error;
                continue;
            }
        };
        let own_url = own.iter().find(|(a, _)| *a == addr).map(|(_, url)| *url);
        let member_name = match own_url {
            Some(_) if !name.is_empty() => name.to_string(),
            _ => {
                temp_name += 1;
                (temp_name - 1).to_string()
            }
        };
        // SRV targets end with a dot; URLs do not.
        let host = record
            .target
            .strip_suffix('.')
            .unwrap_or(record.target.as_str());
        let url = format!("{scheme}://{}", join_host_port(host, record.port));
        match own_url {
            Some(own_url) if !own_url.starts_with(&format!("{scheme}://")) => {
                last_error = format!(
                    "bootstrap at {url} from DNS for {service} has scheme mismatch with \
                     expected peer {own_url}"
                );
            }
            _ => found.push(Found {
                name: member_name,
                url,
                addr,
            }),
        }
    }
    if found.is_empty() {
        return Err(failed(last_error));
    }
    Ok(found)
}

/// `name=url`, as etcd logs a discovered member.
fn node(member: &Found) -> String {
    format!("{}={}", member.name, member.url)
}

/// The `host:port` of `scheme://host:port`.
fn host_port(url: &str) -> &str {
    url.split_once("://").map_or(url, |(_, rest)| rest)
}

/// Go's `net.JoinHostPort`.
fn join_host_port(host: &str, port: u16) -> String {
    if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

/// DNS as the system configures it: SRV records through `/etc/resolv.conf`'s name
/// servers, addresses through the C library (`/etc/hosts`, then DNS), as the peer
/// dialer resolves them.
struct SystemDns {
    resolver: Result<TokioResolver, String>,
    /// The first name server, for messages (Go's `lookup X on 127.0.0.53:53: ...`).
    server: String,
}

impl SystemDns {
    fn new() -> Self {
        let system = hickory_resolver::system_conf::read_system_conf()
            .map_err(|e| format!("cannot read /etc/resolv.conf: {e}"));
        let server = system
            .as_ref()
            .ok()
            .and_then(|(config, _)| config.name_servers().first())
            .map(|ns| {
                let port = ns.connections.first().map_or(53, |c| c.port);
                SocketAddr::new(ns.ip, port).to_string()
            })
            .unwrap_or_else(|| "the system's name servers".into());
        let resolver = system.and_then(|(config, options)| {
            TokioResolver::builder_with_config(config, Default::default())
                .with_options(options)
                .build()
                .map_err(|e| e.to_string())
        });
        SystemDns { resolver, server }
    }
}

impl Lookups for SystemDns {
    async fn srv(&self, name: &str) -> Result<Vec<SrvRecord>, String> {
        let resolver = self.resolver.as_ref().map_err(Clone::clone)?;
        let lookup = resolver
            .srv_lookup(name)
            .await
            .map_err(|e| format!("lookup {name} on {}: {}", self.server, go_reason(&e)))?;
        let records: Vec<SrvRecord> = lookup
            .answers()
            .iter()
            .filter_map(|record| match &record.data {
                RData::SRV(srv) => Some(SrvRecord {
                    target: srv.target.to_utf8(),
                    port: srv.port,
                    priority: srv.priority,
                }),
                _ => None,
            })
            .collect();
        if records.is_empty() {
            return Err(format!("lookup {name} on {}: no such host", self.server));
        }
        Ok(records)
    }

    async fn resolve(&self, host_port: &str) -> Result<SocketAddr, String> {
        let addrs: Vec<SocketAddr> = tokio::net::lookup_host(host_port)
            .await
            .map_err(|e| format!("lookup {host_port}: {e}"))?
            .collect();
        addrs
            .iter()
            .find(|a| a.is_ipv4())
            .or(addrs.first())
            .copied()
            .ok_or_else(|| format!("lookup {host_port}: no such host"))
    }
}

/// Go's resolver's words for a failed lookup.
fn go_reason(error: &NetError) -> String {
    if error.is_nx_domain() || error.is_no_records_found() {
        return "no such host".into();
    }
    match error {
        NetError::Dns(DnsError::ResponseCode(_)) => "server misbehaving".into(),
        NetError::Timeout => "i/o timeout".into(),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    /// DNS as a table: SRV answers by name, addresses by `host:port`.
    #[derive(Default)]
    struct Table {
        srv: HashMap<String, Vec<SrvRecord>>,
        hosts: HashMap<String, [u8; 4]>,
    }

    impl Table {
        fn srv(mut self, name: &str, targets: &[(&str, u16)]) -> Self {
            self.srv.insert(
                name.into(),
                targets
                    .iter()
                    .map(|(target, port)| SrvRecord {
                        target: format!("{target}."),
                        port: *port,
                        priority: 0,
                    })
                    .collect(),
            );
            self
        }

        fn host(mut self, host: &str, ip: [u8; 4]) -> Self {
            self.hosts.insert(host.into(), ip);
            self
        }
    }

    impl Lookups for Table {
        async fn srv(&self, name: &str) -> Result<Vec<SrvRecord>, String> {
            self.srv
                .get(name)
                .cloned()
                .ok_or_else(|| format!("lookup {name} on 127.0.0.53:53: no such host"))
        }

        async fn resolve(&self, host_port: &str) -> Result<SocketAddr, String> {
            let (host, port) = host_port.rsplit_once(':').unwrap();
            let host = host.strip_suffix('.').unwrap_or(host);
            match (host.parse(), self.hosts.get(host)) {
                (Ok(ip), _) => Ok(SocketAddr::new(ip, port.parse().unwrap())),
                (_, Some(ip)) => Ok(SocketAddr::from((*ip, port.parse().unwrap()))),
                _ => Err(format!("lookup {host} on 127.0.0.53:53: no such host")),
            }
        }
    }

    fn three_hosts() -> Table {
        Table::default()
            .host("m1.qk.test", [127, 0, 0, 11])
            .host("m2.qk.test", [127, 0, 0, 12])
            .host("m3.qk.test", [127, 0, 0, 13])
    }

    fn config(args: &[&str]) -> Config {
        let argv = std::iter::once("quantykube").chain(args.iter().copied());
        match crate::config::parse(argv, &|_| None) {
            Ok(crate::config::Invocation::Run { config, .. }) => *config,
            other => panic!("{other:?}"),
        }
    }

    fn member(name: &str, urls: &[&str]) -> ClusterMember {
        ClusterMember {
            name: name.into(),
            peer_urls: urls.iter().map(|u| u.to_string()).collect(),
        }
    }

    async fn run(dns: &Table, args: &[&str]) -> Result<(Vec<ClusterMember>, Vec<String>), String> {
        let config = config(args);
        let domain = config.discovery_srv.clone().unwrap();
        discover(dns, &config, &domain)
            .await
            .map_err(|e| e.to_string())
    }

    #[tokio::test]
    async fn this_member_is_found_by_address_and_the_others_get_placeholders() {
        let dns = three_hosts().srv(
            "_etcd-server._tcp.qk.test",
            &[
                ("m1.qk.test", 2380),
                ("m2.qk.test", 2380),
                ("m3.qk.test", 2380),
            ],
        );
        let found = run(
            &dns,
            &[
                "--name=m2",
                "--initial-advertise-peer-urls=http://m2.qk.test:2380",
                "--discovery-srv=qk.test",
            ],
        )
        .await
        .unwrap();
        assert_eq!(
            found,
            (
                vec![
                    member("0", &["http://m1.qk.test:2380"]),
                    member("1", &["http://m3.qk.test:2380"]),
                    member("m2", &["http://m2.qk.test:2380"]),
                ],
                vec!["http://m2.qk.test:2380".to_string()]
            )
        );

        // Advertised by address: the SRV URL, which resolves alike, is the member's.
        let found = run(
            &dns,
            &[
                "--name=m3",
                "--initial-advertise-peer-urls=http://127.0.0.13:2380",
                "--discovery-srv=qk.test",
            ],
        )
        .await
        .unwrap();
        assert_eq!(found.0[2], member("m3", &["http://m3.qk.test:2380"]));
        assert_eq!(found.1, ["http://m3.qk.test:2380"]);
    }

    #[tokio::test]
    async fn the_service_name_is_appended_to_both_services() {
        let dns = three_hosts().srv("_etcd-server-c1._tcp.qk.test", &[("m1.qk.test", 2380)]);
        let args = [
            "--name=m1",
            "--initial-advertise-peer-urls=http://m1.qk.test:2380",
            "--discovery-srv=qk.test",
        ];
        assert_eq!(
            run(&dns, &args).await.unwrap_err(),
            "error setting up initial cluster: error querying DNS SRV records for \
             _etcd-server-ssl lookup _etcd-server-ssl._tcp.qk.test on 127.0.0.53:53: no such \
             host\nerror querying DNS SRV records for _etcd-server lookup \
             _etcd-server._tcp.qk.test on 127.0.0.53:53: no such host"
        );
        let named = [&args[..], &["--discovery-srv-name=c1"]].concat();
        assert_eq!(
            run(&dns, &named).await.unwrap().0,
            [member("m1", &["http://m1.qk.test:2380"])]
        );
    }

    #[tokio::test]
    async fn etcds_messages_when_this_member_or_a_target_is_missing() {
        let args = [
            "--name=m1",
            "--initial-advertise-peer-urls=http://m1.qk.test:2380",
            "--discovery-srv=qk.test",
        ];
        // Records, but none of them this member.
        let dns = three_hosts().srv("_etcd-server._tcp.qk.test", &[("m2.qk.test", 2380)]);
        assert_eq!(
            run(&dns, &args).await.unwrap_err(),
            r#"error setting up initial cluster: cannot find local etcd member "m1" in SRV records"#
        );
        // A target that does not resolve is skipped; if none resolves, its error is the one.
        let dns = three_hosts().srv(
            "_etcd-server._tcp.qk.test",
            &[("m1.qk.test", 2380), ("m9.qk.test", 2380)],
        );
        assert_eq!(run(&dns, &args).await.unwrap().0.len(), 1);
        let dns = three_hosts().srv("_etcd-server._tcp.qk.test", &[("m9.qk.test", 2380)]);
        assert!(run(&dns, &args).await.unwrap_err().ends_with(
            "error querying DNS SRV records for _etcd-server lookup m9.qk.test on \
             127.0.0.53:53: no such host"
        ));
        // This member's own URL must resolve.
        let unresolved = [
            "--name=m9",
            "--initial-advertise-peer-urls=http://m9.qk.test:2380",
            "--discovery-srv=qk.test",
        ];
        assert_eq!(
            run(&dns, &unresolved).await.unwrap_err(),
            "error setting up initial cluster: lookup m9.qk.test on 127.0.0.53:53: no such host"
        );
    }

    #[tokio::test]
    async fn https_records_are_etcds_and_refused_as_tls() {
        let args = [
            "--name=m1",
            "--initial-advertise-peer-urls=http://m1.qk.test:2380",
            "--discovery-srv=qk.test",
        ];
        // This member's record under the https service: etcd's scheme mismatch.
        let dns = three_hosts().srv("_etcd-server-ssl._tcp.qk.test", &[("m1.qk.test", 2380)]);
        assert!(run(&dns, &args).await.unwrap_err().contains(
            "error querying DNS SRV records for _etcd-server-ssl bootstrap at \
             https://m1.qk.test:2380 from DNS for etcd-server-ssl has scheme mismatch with \
             expected peer http://m1.qk.test:2380"
        ));
        // Another member's: etcd would dial it over TLS, which QuantyKube cannot yet.
        let dns = dns
            .srv("_etcd-server._tcp.qk.test", &[("m1.qk.test", 2380)])
            .srv("_etcd-server-ssl._tcp.qk.test", &[("m2.qk.test", 2380)]);
        assert_eq!(
            run(&dns, &args).await.unwrap_err(),
            "error setting up initial cluster: https://m2.qk.test:2380 from DNS SRV records \
             uses TLS, which QuantyKube does not implement yet"
        );
    }

    #[test]
    fn host_ports_are_joined_as_go_does() {
        assert_eq!(join_host_port("m1.qk.test", 2380), "m1.qk.test:2380");
        assert_eq!(join_host_port("::1", 2380), "[::1]:2380");
        assert_eq!(host_port("http://m1.qk.test:2380"), "m1.qk.test:2380");
    }
}
