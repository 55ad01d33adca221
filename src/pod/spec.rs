//! Who this pod is and where its peers are, read from the environment a StatefulSet
//! (or compose, reproducing it) gives every member: the pod's name and ordinal, the
//! headless Service's DNS suffix, the desired member count, the ports and the schemes.
//! Everything is derived from these; nothing here talks to the network.

use std::path::PathBuf;

use super::PodError;
use crate::identity;

/// The variables `quantykube pod` reads (besides etcd's own `ETCD_*`, passed through).
pub const POD_NAME: &str = "QK_POD_NAME";
pub const PEER_SERVICE: &str = "QK_PEER_SERVICE";
pub const REPLICAS: &str = "QK_REPLICAS";
pub const CLUSTER_TOKEN: &str = "QK_CLUSTER_TOKEN";
pub const CLIENT_PORT: &str = "QK_CLIENT_PORT";
pub const PEER_PORT: &str = "QK_PEER_PORT";
pub const METRICS_PORT: &str = "QK_METRICS_PORT";

/// Where a pod's data lives when `ETCD_DATA_DIR` is not set: the image's volume.
pub const DEFAULT_DATA_DIR: &str = "/var/lib/quantykube";

/// A pod of the member set, as its environment describes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodSpec {
    /// The pod's name, which is also its member name: `<set>-<ordinal>`.
    pub name: String,
    /// The StatefulSet's name: the pod name without `-<ordinal>`.
    pub set: String,
    pub ordinal: u32,
    /// Appended to `<set>-<i>` to reach pod `i` (empty: the pod names resolve as they are).
    pub peer_service: String,
    /// How many members the set should have, as the environment says.
    pub replicas: u32,
    pub token: String,
    pub client_port: u16,
    pub peer_port: u16,
    pub metrics_port: u16,
    pub client_tls: bool,
    pub peer_tls: bool,
    pub data_dir: PathBuf,
    /// `ETCD_LISTEN_METRICS_URLS` is set: the operator chose where probes go.
    pub metrics_urls_set: bool,
    /// `ETCD_DATA_DIR` is set: the server reads it there (etcd refuses a flag beside it).
    pub data_dir_set: bool,
}

impl PodSpec {
    /// Reads the spec through `env` (the process environment, or a test's map).
    pub fn from_env(env: &dyn Fn(&str) -> Option<String>) -> Result<PodSpec, PodError> {
        let set_var = |key: &str| env(key).filter(|v| !v.is_empty());
        let name = set_var(POD_NAME)
            .or_else(|| set_var("HOSTNAME"))
            .ok_or_else(|| PodError::Spec(format!("{POD_NAME} (or HOSTNAME) is not set")))?;
        let (set, ordinal) = split_ordinal(&name)?;
        let replicas = match set_var(REPLICAS) {
            Some(raw) => parse_number::<u32>(REPLICAS, &raw).and_then(|n| {
                if n == 0 {
                    Err(PodError::Spec(format!("{REPLICAS} must be at least 1")))
                } else {
                    Ok(n)
                }
            })?,
            None => return Err(PodError::Spec(format!("{REPLICAS} is not set"))),
        };
        let port = |key: &str, default: u16| match set_var(key) {
            Some(raw) => parse_number::<u16>(key, &raw),
            None => Ok(default),
        };
        let truthy = |key: &str| set_var(key).is_some_and(|v| v.eq_ignore_ascii_case("true"));
        Ok(PodSpec {
            set: set.to_string(),
            ordinal,
            peer_service: set_var(PEER_SERVICE)
                .map(|s| s.trim_matches('.').to_string())
                .unwrap_or_default(),
            replicas,
            token: set_var(CLUSTER_TOKEN).unwrap_or_else(|| "quantykube".to_string()),
            client_port: port(CLIENT_PORT, 2379)?,
            peer_port: port(PEER_PORT, 2380)?,
            metrics_port: port(METRICS_PORT, 2381)?,
            client_tls: set_var("ETCD_CERT_FILE").is_some() || truthy("ETCD_AUTO_TLS"),
            peer_tls: set_var("ETCD_PEER_CERT_FILE").is_some() || truthy("ETCD_PEER_AUTO_TLS"),
            data_dir: set_var("ETCD_DATA_DIR")
                .map(PathBuf::from)
                .unwrap_or_else(|| PathBuf::from(DEFAULT_DATA_DIR)),
            metrics_urls_set: set_var("ETCD_LISTEN_METRICS_URLS").is_some(),
            data_dir_set: set_var("ETCD_DATA_DIR").is_some(),
            name,
        })
    }

    /// The DNS name of pod `ordinal` of this set.
    pub fn host(&self, ordinal: u32) -> String {
        if self.peer_service.is_empty() {
            format!("{}-{ordinal}", self.set)
        } else {
            format!("{}-{ordinal}.{}", self.set, self.peer_service)
        }
    }

    pub fn member_name(&self, ordinal: u32) -> String {
        format!("{}-{ordinal}", self.set)
    }

    pub fn peer_url(&self, ordinal: u32) -> String {
        let scheme = if self.peer_tls { "https" } else { "http" };
        format!("{scheme}://{}:{}", self.host(ordinal), self.peer_port)
    }

    pub fn client_url(&self, ordinal: u32) -> String {
        let scheme = if self.client_tls { "https" } else { "http" };
        format!("{scheme}://{}:{}", self.host(ordinal), self.client_port)
    }

    /// Whether `ordinal` belongs to a set of `replicas` members.
    pub fn wanted(&self, replicas: u32) -> bool {
        self.ordinal < replicas
    }

    /// The founding members of a set of `replicas`: ordinals `0..replicas`, as
    /// `--initial-cluster` names them.
    pub fn founders(&self, replicas: u32) -> Vec<(String, String)> {
        (0..replicas)
            .map(|i| (self.member_name(i), self.peer_url(i)))
            .collect()
    }

    /// The member id and cluster id a static bootstrap of `replicas` founders gives
    /// this pod, as etcd computes them from the peer URLs and the token.
    pub fn founding_identity(&self, replicas: u32) -> (u64, u64) {
        let ids = (0..replicas).map(|i| identity::member_id(&[self.peer_url(i)], &self.token));
        (
            identity::member_id(&[self.peer_url(self.ordinal)], &self.token),
            identity::cluster_id(ids),
        )
    }

    /// The server's command line for a member started with `initial_cluster`
    /// (`name=url` pairs) in `state` (`new` or `existing`). Flags win over the `ETCD_*`
    /// variables, so these are the only settings `pod start` imposes.
    pub fn server_args(&self, initial_cluster: &[(String, String)], state: &str) -> Vec<String> {
        let client_scheme = if self.client_tls { "https" } else { "http" };
        let peer_scheme = if self.peer_tls { "https" } else { "http" };
        let cluster = initial_cluster
            .iter()
            .map(|(name, url)| format!("{name}={url}"))
            .collect::<Vec<_>>()
            .join(",");
        let mut args = vec![
            "quantykube".to_string(),
            format!("--name={}", self.name),
            format!(
                "--listen-client-urls={client_scheme}://0.0.0.0:{}",
                self.client_port
            ),
            format!("--advertise-client-urls={}", self.client_url(self.ordinal)),
            format!(
                "--listen-peer-urls={peer_scheme}://0.0.0.0:{}",
                self.peer_port
            ),
            format!(
                "--initial-advertise-peer-urls={}",
                self.peer_url(self.ordinal)
            ),
            format!("--initial-cluster={cluster}"),
            format!("--initial-cluster-state={state}"),
            format!("--initial-cluster-token={}", self.token),
        ];
        if !self.data_dir_set {
            args.push(format!("--data-dir={}", self.data_dir.display()));
        }
        // Probes reach the metrics port in plain HTTP whatever the client side's TLS,
        // unless the operator chose the metrics URLs.
        if !self.metrics_urls_set {
            args.push(format!(
                "--listen-metrics-urls=http://0.0.0.0:{}",
                self.metrics_port
            ));
        }
        args
    }
}

/// `<set>-<ordinal>` split at its last `-`.
fn split_ordinal(name: &str) -> Result<(&str, u32), PodError> {
    let invalid = || {
        PodError::Spec(format!(
            "pod name {name:?} does not end in -<ordinal>, as a StatefulSet's pods do"
        ))
    };
    let (set, ordinal) = name.rsplit_once('-').ok_or_else(invalid)?;
    if set.is_empty() || ordinal.is_empty() || !ordinal.bytes().all(|b| b.is_ascii_digit()) {
        return Err(invalid());
    }
    Ok((set, ordinal.parse().map_err(|_| invalid())?))
}

fn parse_number<T: std::str::FromStr>(key: &str, raw: &str) -> Result<T, PodError> {
    raw.trim()
        .parse()
        .map_err(|_| PodError::Spec(format!("{key}={raw:?} is not a valid number")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn spec(vars: &[(&str, &str)]) -> Result<PodSpec, PodError> {
        let map: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        PodSpec::from_env(&move |key| map.get(key).cloned())
    }

    #[test]
    fn a_statefulset_pod_names_its_peers_through_the_headless_service() {
        let pod = spec(&[
            (POD_NAME, "db-quantykube-2"),
            (PEER_SERVICE, "db-quantykube-headless.ns.svc.cluster.local."),
            (REPLICAS, "3"),
            ("ETCD_PEER_CERT_FILE", "/tls/peer.crt"),
        ])
        .unwrap();
        assert_eq!(pod.set, "db-quantykube");
        assert_eq!(pod.ordinal, 2);
        assert_eq!(
            pod.peer_url(0),
            "https://db-quantykube-0.db-quantykube-headless.ns.svc.cluster.local:2380"
        );
        assert_eq!(
            pod.client_url(1),
            "http://db-quantykube-1.db-quantykube-headless.ns.svc.cluster.local:2379"
        );
        assert_eq!(pod.founders(3).len(), 3);
        assert!(pod.wanted(3) && !pod.wanted(2));
    }

    #[test]
    fn compose_hosts_are_the_member_names() {
        let pod = spec(&[("HOSTNAME", "qk-0"), (REPLICAS, "1")]).unwrap();
        assert_eq!(pod.peer_url(4), "http://qk-4:2380");
        assert_eq!(pod.data_dir, PathBuf::from(DEFAULT_DATA_DIR));
        assert_eq!(pod.token, "quantykube");
    }

    #[test]
    fn founders_get_etcds_static_bootstrap_ids() {
        let pod = spec(&[(POD_NAME, "qk-1"), (REPLICAS, "3")]).unwrap();
        let (member, cluster) = pod.founding_identity(3);
        assert_eq!(
            member,
            identity::member_id(&["http://qk-1:2380".to_string()], "quantykube")
        );
        let ids = (0..3).map(|i| identity::member_id(&[pod.peer_url(i)], "quantykube"));
        assert_eq!(cluster, identity::cluster_id(ids));
    }

    #[test]
    fn malformed_environments_are_refused_with_the_variable_named() {
        for (vars, needle) in [
            (vec![(REPLICAS, "3")], "QK_POD_NAME"),
            (vec![(POD_NAME, "qk"), (REPLICAS, "3")], "-<ordinal>"),
            (vec![(POD_NAME, "qk-"), (REPLICAS, "3")], "-<ordinal>"),
            (vec![(POD_NAME, "-3"), (REPLICAS, "3")], "-<ordinal>"),
            (vec![(POD_NAME, "qk-1a"), (REPLICAS, "3")], "-<ordinal>"),
            (
                vec![(POD_NAME, "qk-99999999999"), (REPLICAS, "3")],
                "-<ordinal>",
            ),
            (vec![(POD_NAME, "qk-1")], "QK_REPLICAS is not set"),
            (vec![(POD_NAME, "qk-1"), (REPLICAS, "0")], "at least 1"),
            (vec![(POD_NAME, "qk-1"), (REPLICAS, "three")], "QK_REPLICAS"),
            (
                vec![(POD_NAME, "qk-1"), (REPLICAS, "3"), (PEER_PORT, "70000")],
                "QK_PEER_PORT",
            ),
        ] {
            let error = spec(&vars).unwrap_err().to_string();
            assert!(error.contains(needle), "{vars:?}: {error}");
        }
    }
}
