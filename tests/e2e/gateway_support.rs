//! The JSON gateway as its users reach it: curl posting JSON, with one answer or a
//! chunked stream of them (Watch, LeaseKeepAlive, Snapshot, Observe); and, for a
//! request body that goes on while its answer streams, a plain HTTP/1.1 client over TCP
//! that sends its body chunk by chunk (`Duplex`). Answers are parsed with serde_json; `scrub`
//! takes out what two clusters can never share (cluster and member ids, terms).

#![allow(dead_code)]

use std::process::Stdio;
use std::time::Duration;

use base64::Engine as _;
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::net::TcpStream;
use tokio::process::{Child, ChildStdout};

use crate::certs::Pki;
use crate::harness::*;

/// A one-member cluster on https client URLs with `--client-cert-auth`, reached with
/// kubeadm's API-server client certificate (a CN), and the PKI it was made from.
pub async fn mtls_cluster() -> (Pki, Cluster) {
    let pki = Pki::new(loopback_ip());
    let tls = ClientTls::new(pki.ca_cert()).identity(
        pki.pki("apiserver-etcd-client.crt"),
        pki.pki("apiserver-etcd-client.key"),
    );
    let cluster = ClusterOptions::new(1)
        .https_clients(tls)
        .args([
            format!("--cert-file={}", pki.etcd("server.crt").display()),
            format!("--key-file={}", pki.etcd("server.key").display()),
            format!("--trusted-ca-file={}", pki.ca_cert().display()),
            "--client-cert-auth=true".to_string(),
        ])
        .start()
        .await;
    (pki, cluster)
}

pub fn b64(text: impl AsRef<[u8]>) -> String {
    base64::engine::general_purpose::STANDARD.encode(text)
}

pub fn unb64(value: &Value) -> Vec<u8> {
    base64::engine::general_purpose::STANDARD
        .decode(
            value
                .as_str()
                .unwrap_or_else(|| panic!("not base64 text: {value}")),
        )
        .unwrap_or_else(|e| panic!("{value}: {e}"))
}

/// Removes, everywhere in `value`, the header fields that differ between clusters.
pub fn scrub(value: &mut Value) {
    match value {
        Value::Object(map) => {
            if let Some(Value::Object(header)) = map.get_mut("header") {
                for field in ["cluster_id", "member_id", "raft_term"] {
                    header.remove(field);
                }
            }
            map.values_mut().for_each(scrub);
        }
        Value::Array(values) => values.iter_mut().for_each(scrub),
        _ => {}
    }
}

/// One member's gateway.
#[derive(Clone)]
pub struct Gateway {
    pub base: String,
    pub tls: Option<ClientTls>,
    pub token: Option<String>,
}

/// An answer: status, headers, and the body as JSON (`Value::Null` if it is no JSON).
#[derive(Debug, Clone)]
pub struct Answer {
    pub status: u16,
    pub http: HttpAnswer,
    pub json: Value,
}

impl Gateway {
    pub fn of(cluster: &Cluster, i: usize) -> Gateway {
        Gateway {
            base: cluster.endpoint(i),
            tls: cluster.client_tls().cloned(),
            token: None,
        }
    }

    pub fn with_token(&self, token: &str) -> Gateway {
        Gateway {
            token: Some(token.to_string()),
            ..self.clone()
        }
    }

    fn header_args(&self) -> Vec<String> {
        let mut args = vec!["-H".to_string(), "Expect:".to_string()];
        if let Some(token) = &self.token {
            args.extend(["-H".to_string(), format!("Authorization: {token}")]);
        }
        args
    }

    /// `method` with `body` to `path` (e.g. `/v3/kv/put`).
    pub async fn request(&self, method: &str, path: &str, body: &[u8]) -> Answer {
        let file = tempfile::NamedTempFile::new().expect("temp file");
        std::fs::write(file.path(), body).expect("write body");
        let data = format!("@{}", file.path().display());
        let mut args: Vec<String> = self.header_args();
        args.extend(["--data-binary".to_string(), data]);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let url = format!("{}{path}", self.base);
        let http = http_request_with(
            method,
            &url,
            self.tls.as_ref(),
            Duration::from_secs(30),
            &args,
        )
        .await
        .unwrap_or_else(|e| panic!("{e}"));
        // The first JSON value of the body: curl -i prints HTTP trailers (etcd sends
        // `Grpc-Trailer-Content-Type` after an error) right after it.
        let json = serde_json::Deserializer::from_str(&http.body)
            .into_iter::<Value>()
            .next()
            .and_then(Result::ok)
            .unwrap_or(Value::Null);
        Answer {
            status: http.status,
            http,
            json,
        }
    }

    pub async fn post_raw(&self, path: &str, body: &[u8]) -> Answer {
        self.request("POST", path, body).await
    }

    pub async fn post(&self, path: &str, body: Value) -> Answer {
        self.post_raw(path, body.to_string().as_bytes()).await
    }

    /// A call that must succeed: its JSON answer.
    pub async fn call(&self, path: &str, body: Value) -> Value {
        let answer = self.post(path, body.clone()).await;
        assert_eq!(
            answer.status, 200,
            "POST {path} {body}: {} {}",
            answer.status, answer.http.body
        );
        answer.json
    }

    pub async fn put(&self, key: &str, value: &str) -> Value {
        self.call("/v3/kv/put", json!({"key": b64(key), "value": b64(value)}))
            .await
    }

    /// The current revision, as a Range answers it.
    pub async fn revision(&self) -> i64 {
        let answer = self.call("/v3/kv/range", json!({"key": b64("\0")})).await;
        int(&answer["header"]["revision"])
    }

    /// A streaming call, as gateway clients make one: `messages` one after another as
    /// the whole request body, and the answer's chunks handed out as they arrive.
    /// (etcd 3.4's Go HTTP/1.1 server starts an answer only once the request body
    /// ended; for a body that goes on while the answer streams, see [`Duplex`].)
    pub async fn stream(&self, path: &str, messages: &[Value]) -> Stream {
        let body: String = messages.iter().map(|m| format!("{m}\n")).collect();
        let file = tempfile::NamedTempFile::new().expect("temp file");
        std::fs::write(file.path(), body).expect("write body");
        let mut cmd = tokio::process::Command::new("curl");
        cmd.args(["-sS", "-N", "-i", "--noproxy", "*", "-X", "POST"])
            .args(self.header_args())
            .arg("--data-binary")
            .arg(format!("@{}", file.path().display()))
            .args(
                self.tls
                    .as_ref()
                    .map(ClientTls::curl_flags)
                    .unwrap_or_default(),
            )
            .arg(format!("{}{path}", self.base))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true);
        let mut child = cmd.spawn().expect("run curl");
        let stdout = child.stdout.take().expect("curl stdout");
        Stream {
            child,
            _body: file,
            lines: BufReader::new(stdout).lines(),
            status: None,
        }
    }
}

/// A 64-bit integer as the gateway writes it (a string), or 0 when left out.
pub fn int(value: &Value) -> i64 {
    match value {
        Value::Null => 0,
        Value::String(s) => s.parse().unwrap_or_else(|_| panic!("not an integer: {s}")),
        Value::Number(n) => n.as_i64().unwrap_or_else(|| panic!("not an i64: {n}")),
        other => panic!("not an integer: {other}"),
    }
}

/// One streaming call in flight.
pub struct Stream {
    child: Child,
    _body: tempfile::NamedTempFile,
    lines: Lines<BufReader<ChildStdout>>,
    status: Option<u16>,
}

impl Stream {
    /// The answer's HTTP status, once its head has arrived.
    pub fn status(&self) -> Option<u16> {
        self.status
    }

    /// The next chunk of the answer as JSON, or `None` when the answer ended or
    /// nothing came within `wait`.
    pub async fn next(&mut self, wait: Duration) -> Option<Value> {
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            let line = tokio::time::timeout_at(deadline, self.lines.next_line())
                .await
                .ok()?
                .ok()??;
            let line = line.trim_end_matches('\r');
            if let Some(code) = line.strip_prefix("HTTP/1.1 ") {
                self.status = code.split_whitespace().next().and_then(|c| c.parse().ok());
                continue;
            }
            if line.is_empty() || !line.starts_with('{') {
                // The head's other lines and the blank line after it.
                continue;
            }
            return Some(serde_json::from_str(line).unwrap_or_else(|e| panic!("{line}: {e}")));
        }
    }

    /// The next `{"result": ...}` chunk, which must come within `wait`.
    pub async fn result(&mut self, wait: Duration) -> Value {
        let chunk = self
            .next(wait)
            .await
            .unwrap_or_else(|| panic!("no stream chunk within {wait:?}"));
        match chunk.get("result") {
            Some(result) => result.clone(),
            None => panic!("not a result: {chunk}"),
        }
    }

    /// Whether the answer ended (curl exited) within `wait`.
    pub async fn ended(&mut self, wait: Duration) -> bool {
        tokio::time::timeout(wait, self.child.wait()).await.is_ok()
    }

    /// Closes the connection, as a client that goes away.
    pub async fn disconnect(mut self) {
        let _ = self.child.kill().await;
    }
}

/// A streaming call over one plain TCP connection that keeps sending its request body
/// (chunked) while the answer streams back: what curl cannot do (it sends a piped body
/// only once it ends) and etcd 3.4 does not serve (see [`Gateway::stream`]).
pub struct Duplex {
    tcp: TcpStream,
    read: Vec<u8>,
    /// Bytes of the current answer chunk still to come.
    chunk_left: usize,
    pub status: u16,
}

impl Duplex {
    /// Posts to `url` (`http://host:port/path`) and sends `first`.
    pub async fn open(url: &str, first: &Value) -> Duplex {
        let rest = url.strip_prefix("http://").expect("an http:// URL");
        let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
        let tcp = TcpStream::connect(authority).await.expect("connect");
        let mut duplex = Duplex {
            tcp,
            read: Vec::new(),
            chunk_left: 0,
            status: 0,
        };
        let head = format!(
            "POST {path} HTTP/1.1\r\nHost: {authority}\r\nTransfer-Encoding: chunked\r\n\r\n"
        );
        duplex
            .tcp
            .write_all(head.as_bytes())
            .await
            .expect("send head");
        duplex.send(first).await;
        duplex
    }

    /// One more message of the request body, sent at once as a chunk of its own.
    pub async fn send(&mut self, message: &Value) {
        let body = format!("{message}\n");
        let chunk = format!("{:x}\r\n{body}\r\n", body.len());
        self.tcp
            .write_all(chunk.as_bytes())
            .await
            .expect("send a chunk");
    }

    /// Ends the request body (the client's half-close of the stream).
    pub async fn close_send(&mut self) {
        self.tcp
            .write_all(b"0\r\n\r\n")
            .await
            .expect("end the body");
    }

    async fn fill(&mut self, deadline: tokio::time::Instant) -> Option<()> {
        let mut buf = [0u8; 8192];
        let n = tokio::time::timeout_at(deadline, self.tcp.read(&mut buf))
            .await
            .ok()?
            .ok()?;
        if n == 0 {
            return None;
        }
        self.read.extend_from_slice(&buf[..n]);
        Some(())
    }

    /// The next line of the answer body (chunk framing removed), within `wait`.
    async fn line(&mut self, wait: Duration) -> Option<String> {
        let deadline = tokio::time::Instant::now() + wait;
        if self.status == 0 {
            while !self.read.windows(4).any(|w| w == b"\r\n\r\n") {
                self.fill(deadline).await?;
            }
            let end = self.read.windows(4).position(|w| w == b"\r\n\r\n")? + 4;
            let head = String::from_utf8_lossy(&self.read[..end]).into_owned();
            self.status = head.split_whitespace().nth(1)?.parse().ok()?;
            self.read.drain(..end);
        }
        let mut body = Vec::new();
        loop {
            if self.chunk_left == 0 {
                while !self.read.windows(2).any(|w| w == b"\r\n") {
                    self.fill(deadline).await?;
                }
                let end = self.read.windows(2).position(|w| w == b"\r\n")?;
                let size = String::from_utf8_lossy(&self.read[..end])
                    .trim()
                    .to_string();
                self.read.drain(..end + 2);
                self.chunk_left = usize::from_str_radix(&size, 16).ok()?;
                if self.chunk_left == 0 {
                    return None;
                }
            }
            while self.read.len() < self.chunk_left + 2 {
                self.fill(deadline).await?;
            }
            body.extend(self.read.drain(..self.chunk_left));
            self.read.drain(..2);
            self.chunk_left = 0;
            if body.ends_with(b"\n") {
                return Some(String::from_utf8_lossy(&body).trim_end().to_string());
            }
        }
    }

    /// The next `{"result": ...}` message, which must come within `wait`.
    pub async fn result(&mut self, wait: Duration) -> Value {
        let line = self
            .line(wait)
            .await
            .unwrap_or_else(|| panic!("no stream chunk within {wait:?}"));
        let chunk: Value = serde_json::from_str(&line).unwrap_or_else(|e| panic!("{line}: {e}"));
        chunk
            .get("result")
            .cloned()
            .unwrap_or_else(|| panic!("not a result: {chunk}"))
    }
}
