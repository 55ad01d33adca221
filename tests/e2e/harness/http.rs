//! HTTP(S) requests by curl, as operators and kubelet-like probes make them, and their
//! answers ([`HttpAnswer`]).

use std::process::Stdio;
use std::time::Duration;

use super::ClientTls;

/// One HTTP answer, as curl received it.
#[derive(Debug, Clone)]
pub struct HttpAnswer {
    pub status: u16,
    /// Header names lower-cased.
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl HttpAnswer {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == &name.to_ascii_lowercase())
            .map(|(_, v)| v.as_str())
    }
}

/// An HTTP(S) request by curl, as operators and kubelet-like probes make them: `tls`
/// gives `--cacert`/`--cert`/`--key` for https. `Err` carries curl's exit status and
/// message when no HTTP answer came (refused connection, TLS failure, timeout).
pub async fn http_request(
    method: &str,
    url: &str,
    tls: Option<&ClientTls>,
    max_time: Duration,
) -> Result<HttpAnswer, String> {
    http_request_with(method, url, tls, max_time, &[]).await
}

/// As [`http_request`], with more curl arguments (e.g. `--http1.1`).
pub async fn http_request_with(
    method: &str,
    url: &str,
    tls: Option<&ClientTls>,
    max_time: Duration,
    curl_args: &[&str],
) -> Result<HttpAnswer, String> {
    let mut cmd = tokio::process::Command::new("curl");
    cmd.args(["-sS", "-i", "--noproxy", "*", "-X", method])
        .args(curl_args)
        .arg("--max-time")
        .arg(max_time.as_secs_f64().to_string())
        .args(tls.map(ClientTls::curl_flags).unwrap_or_default())
        .arg(url)
        .stdin(Stdio::null())
        .kill_on_drop(true);
    let out = tokio::time::timeout(max_time + Duration::from_secs(5), cmd.output())
        .await
        .unwrap_or_else(|_| panic!("curl {url} did not finish"))
        .expect("run curl");
    if !out.status.success() {
        return Err(format!(
            "curl {method} {url}: {} {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (head, body) = text
        .split_once("\r\n\r\n")
        .unwrap_or_else(|| panic!("curl {url}: no header end in {text:?}"));
    let mut lines = head.lines();
    let status_line = lines.next().unwrap_or_default();
    let status = status_line
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("curl {url}: status line {status_line:?}"));
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    Ok(HttpAnswer {
        status,
        headers,
        body: body.to_owned(),
    })
}

/// A GET by curl; panics unless an HTTP answer came.
pub async fn http_get(url: &str, tls: Option<&ClientTls>) -> HttpAnswer {
    http_request("GET", url, tls, Duration::from_secs(20))
        .await
        .unwrap_or_else(|e| panic!("{e}"))
}
