//! How many members the set should have. In Kubernetes the StatefulSet's
//! `spec.replicas` is the truth (so that `kubectl scale` and a Helm upgrade agree, and
//! a pod's preStop hook can tell a scale down from a restart); it is read from the API
//! server with the pod's service account. Elsewhere (compose), and whenever the API
//! cannot be read, `QK_REPLICAS` is.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use http_body_util::{BodyExt, Empty};
use hyper::body::Bytes;
use rustls::pki_types::ServerName;
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

use super::spec::PodSpec;

/// The StatefulSet whose `spec.replicas` counts, and the namespace it is in.
pub const STATEFULSET: &str = "QK_STATEFULSET";
pub const NAMESPACE: &str = "QK_NAMESPACE";
const SERVICE_ACCOUNT: &str = "/var/run/secrets/kubernetes.io/serviceaccount";
const API_TIMEOUT: Duration = Duration::from_secs(5);

/// Where the desired member count comes from.
#[derive(Clone, Debug)]
pub struct DesiredReplicas {
    kube: Option<KubeStatefulSet>,
}

#[derive(Clone, Debug)]
struct KubeStatefulSet {
    host: String,
    port: String,
    namespace: String,
    name: String,
    credentials: PathBuf,
}

impl DesiredReplicas {
    /// The Kubernetes API when the pod runs in Kubernetes and names its StatefulSet,
    /// otherwise the environment alone.
    pub fn from_env(env: &dyn Fn(&str) -> Option<String>) -> DesiredReplicas {
        let kube = (|| {
            Some(KubeStatefulSet {
                host: env("KUBERNETES_SERVICE_HOST").filter(|v| !v.is_empty())?,
                port: env("KUBERNETES_SERVICE_PORT").unwrap_or_else(|| "443".into()),
                namespace: env(NAMESPACE).filter(|v| !v.is_empty())?,
                name: env(STATEFULSET).filter(|v| !v.is_empty())?,
                credentials: PathBuf::from(SERVICE_ACCOUNT),
            })
        })();
        DesiredReplicas { kube }
    }

    /// The desired count now: the StatefulSet's, or `QK_REPLICAS` if it cannot be read.
    pub async fn get(&self, spec: &PodSpec) -> u32 {
        let Some(kube) = &self.kube else {
            return spec.replicas;
        };
        match tokio::time::timeout(API_TIMEOUT, kube.replicas()).await {
            Ok(Ok(replicas)) => replicas,
            Ok(Err(error)) => {
                tracing::warn!(%error, statefulset = %kube.name, fallback = spec.replicas, "cannot read the StatefulSet's replicas; using QK_REPLICAS");
                spec.replicas
            }
            Err(_) => {
                tracing::warn!(statefulset = %kube.name, fallback = spec.replicas, "the Kubernetes API did not answer; using QK_REPLICAS");
                spec.replicas
            }
        }
    }
}

impl KubeStatefulSet {
    /// GET apps/v1 StatefulSet, with the service account's token and CA.
    async fn replicas(&self) -> Result<u32, String> {
        let token = std::fs::read_to_string(self.credentials.join("token"))
            .map_err(|e| format!("service account token: {e}"))?;
        let ca = crate::transport::read_certificates(&self.credentials.join("ca.crt"))
            .map_err(|e| e.to_string())?;
        let mut roots = rustls::RootCertStore::empty();
        for cert in ca {
            roots
                .add(cert)
                .map_err(|e| format!("service account CA: {e}"))?;
        }
        let tls = rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots)
        .with_no_client_auth();
        let host = self.host.trim_matches(['[', ']']).to_string();
        let server_name =
            ServerName::try_from(host.clone()).map_err(|e| format!("API host {host}: {e}"))?;
        let tcp = TcpStream::connect((host.as_str(), self.port.parse::<u16>().unwrap_or(443)))
            .await
            .map_err(|e| format!("connect to the API server: {e}"))?;
        let stream = TlsConnector::from(Arc::new(tls))
            .connect(server_name, tcp)
            .await
            .map_err(|e| format!("TLS with the API server: {e}"))?;
        let (mut sender, connection) =
            hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
                .await
                .map_err(|e| e.to_string())?;
        tokio::spawn(connection);
        let path = format!(
            "/apis/apps/v1/namespaces/{}/statefulsets/{}",
            self.namespace, self.name
        );
        let request = http::Request::get(path)
            .header(http::header::HOST, &self.host)
            .header(
                http::header::AUTHORIZATION,
                format!("Bearer {}", token.trim()),
            )
            .header(http::header::ACCEPT, "application/json")
            .body(Empty::<Bytes>::new())
            .map_err(|e| e.to_string())?;
        let response = sender
            .send_request(request)
            .await
            .map_err(|e| e.to_string())?;
        let status = response.status();
        let body = response
            .into_body()
            .collect()
            .await
            .map_err(|e| e.to_string())?
            .to_bytes();
        if !status.is_success() {
            // The API's own message (never the token) says what is missing, e.g. RBAC.
            let message = serde_json::from_slice::<serde_json::Value>(&body)
                .ok()
                .and_then(|v| v.get("message").and_then(|m| m.as_str()).map(String::from))
                .unwrap_or_default();
            return Err(format!("the API server answered {status}: {message}"));
        }
        replicas_of(&body)
    }
}

/// `spec.replicas` of a StatefulSet's JSON (1 when unset, as Kubernetes defaults it).
fn replicas_of(body: &[u8]) -> Result<u32, String> {
    let value: serde_json::Value =
        serde_json::from_slice(body).map_err(|e| format!("StatefulSet JSON: {e}"))?;
    match value.pointer("/spec/replicas") {
        None | Some(serde_json::Value::Null) => Ok(1),
        Some(n) => n
            .as_u64()
            .and_then(|n| u32::try_from(n).ok())
            .ok_or_else(|| format!("spec.replicas is not a count: {n}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replicas_are_read_from_a_statefulset() {
        assert_eq!(replicas_of(br#"{"spec":{"replicas":5}}"#), Ok(5));
        assert_eq!(replicas_of(br#"{"spec":{}}"#), Ok(1));
        assert!(replicas_of(br#"{"spec":{"replicas":-1}}"#).is_err());
        assert!(replicas_of(br#"{"spec":{"replicas":"3"}}"#).is_err());
        assert!(replicas_of(b"not json").is_err());
    }

    #[test]
    fn kubernetes_is_used_only_when_the_pod_names_its_statefulset() {
        let outside = DesiredReplicas::from_env(&|_| None);
        assert!(outside.kube.is_none());
        let inside = DesiredReplicas::from_env(&|key| match key {
            "KUBERNETES_SERVICE_HOST" => Some("10.0.0.1".into()),
            STATEFULSET => Some("qk".into()),
            NAMESPACE => Some("db".into()),
            _ => None,
        });
        assert!(inside.kube.is_some());
    }
}

#[cfg(test)]
mod api_server_tests {
    //! The StatefulSet read against a stand-in API server on loopback (HTTPS, as
    //! Kubernetes serves it): the service account's token goes in the request, a server
    //! whose certificate another CA signed is refused, and a refusal by the API is
    //! reported in the API's words; in no case does the token appear in an error.
    use super::*;
    use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair, SanType};
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    const TOKEN: &str = "service-account-token-value";

    fn ca(name: &str) -> CertifiedIssuer<'static, KeyPair> {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, name);
        CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap()
    }

    /// A server certificate for 127.0.0.1 that `issuer` signed.
    fn server_tls(issuer: &CertifiedIssuer<'static, KeyPair>) -> Arc<rustls::ServerConfig> {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.subject_alt_names = vec![SanType::IpAddress("127.0.0.1".parse().unwrap())];
        let key = KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, issuer).unwrap();
        let chain = vec![CertificateDer::from_pem_slice(cert.pem().as_bytes()).unwrap()];
        let key = PrivateKeyDer::from_pem_slice(key.serialize_pem().as_bytes()).unwrap();
        Arc::new(
            rustls::ServerConfig::builder_with_provider(Arc::new(
                rustls::crypto::ring::default_provider(),
            ))
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(chain, key)
            .unwrap(),
        )
    }

    /// Answers every request with `status` and `body`; yields each request's head.
    async fn api_server(
        tls: Arc<rustls::ServerConfig>,
        status: &'static str,
        body: &'static str,
    ) -> (u16, tokio::sync::mpsc::Receiver<String>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let (heads, received) = tokio::sync::mpsc::channel(4);
        let acceptor = tokio_rustls::TlsAcceptor::from(tls);
        tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                let Ok(mut stream) = acceptor.accept(tcp).await else {
                    continue;
                };
                let mut head = Vec::new();
                let mut buf = [0u8; 1024];
                while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                    match stream.read(&mut buf).await {
                        Ok(0) | Err(_) => break,
                        Ok(n) => head.extend_from_slice(&buf[..n]),
                    }
                }
                let _ = heads
                    .send(String::from_utf8_lossy(&head).into_owned())
                    .await;
                let response = format!(
                    "HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = stream.write_all(response.as_bytes()).await;
                let _ = stream.shutdown().await;
            }
        });
        (port, received)
    }

    fn credentials(trusted: &CertifiedIssuer<'static, KeyPair>) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("token"), format!("{TOKEN}\n")).unwrap();
        std::fs::write(dir.path().join("ca.crt"), trusted.pem()).unwrap();
        dir
    }

    fn statefulset(port: u16, credentials: &tempfile::TempDir) -> KubeStatefulSet {
        KubeStatefulSet {
            host: "127.0.0.1".into(),
            port: port.to_string(),
            namespace: "db".into(),
            name: "qk".into(),
            credentials: credentials.path().to_path_buf(),
        }
    }

    #[tokio::test]
    async fn the_statefulset_is_read_with_the_service_accounts_token() {
        let cluster_ca = ca("cluster-ca");
        let dir = credentials(&cluster_ca);
        let (port, mut heads) = api_server(
            server_tls(&cluster_ca),
            "200 OK",
            r#"{"kind":"StatefulSet","spec":{"replicas":5}}"#,
        )
        .await;
        assert_eq!(statefulset(port, &dir).replicas().await, Ok(5));
        let head = heads.recv().await.unwrap().to_ascii_lowercase();
        assert!(
            head.starts_with("get /apis/apps/v1/namespaces/db/statefulsets/qk http/1.1"),
            "{head}"
        );
        assert!(
            head.contains(&format!("authorization: bearer {TOKEN}")),
            "{head}"
        );
    }

    #[tokio::test]
    async fn a_server_another_ca_signed_is_refused_and_the_pod_falls_back() {
        let cluster_ca = ca("cluster-ca");
        let dir = credentials(&cluster_ca);
        let (port, mut heads) = api_server(
            server_tls(&ca("forged-ca")),
            "200 OK",
            r#"{"spec":{"replicas":1}}"#,
        )
        .await;
        let error = statefulset(port, &dir).replicas().await.unwrap_err();
        assert!(error.starts_with("TLS with the API server"), "{error}");
        assert!(!error.contains(TOKEN));
        // The token never left: the handshake failed before any request.
        assert!(heads.try_recv().is_err());
        let spec = super::super::spec::PodSpec::from_env(&|key| match key {
            "QK_POD_NAME" => Some("qk-1".into()),
            "QK_REPLICAS" => Some("3".into()),
            _ => None,
        })
        .unwrap();
        let desired = DesiredReplicas {
            kube: Some(statefulset(port, &dir)),
        };
        assert_eq!(desired.get(&spec).await, 3);
    }

    #[tokio::test]
    async fn a_refusal_is_reported_in_the_apis_words() {
        let cluster_ca = ca("cluster-ca");
        let dir = credentials(&cluster_ca);
        let (port, _heads) = api_server(
            server_tls(&cluster_ca),
            "403 Forbidden",
            r#"{"kind":"Status","message":"statefulsets.apps \"qk\" is forbidden: User \"system:serviceaccount:db:default\" cannot get resource"}"#,
        )
        .await;
        let error = statefulset(port, &dir).replicas().await.unwrap_err();
        assert!(error.contains("403"), "{error}");
        assert!(error.contains("cannot get resource"), "{error}");
        assert!(!error.contains(TOKEN));
        // An unreadable answer is an error too, never a count.
        let (port, _heads) = api_server(server_tls(&cluster_ca), "200 OK", "{not json").await;
        assert!(statefulset(port, &dir).replicas().await.is_err());
    }
}
