//! `unix://` and `unixs://` client listeners, as etcd's `transport.NewUnixListener`
//! makes them: the socket's path is the URL's host and path (`unix://localhost:2379` is
//! the file `localhost:2379` in the working directory, `unix:///run/etcd.sock` is
//! `/run/etcd.sock`), a stale socket left by an earlier run is removed before binding,
//! the file gets the process umask's permissions (as Go's `net.Listen` gives it), and
//! it is removed again when the listener closes. Also the stream type that carries
//! either a TCP or a unix connection.
//!
//! This module owns socket files. It never removes anything but a socket (etcd would
//! remove a regular file of that name too), and never looks at the bytes it carries.

use std::io;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpStream, UnixListener, UnixStream};
use url::Url;

/// The socket file a `unix://` or `unixs://` URL names: its host followed by its path,
/// percent-decoded, as etcd's `u.Host + u.Path`.
pub fn socket_path(url: &Url) -> PathBuf {
    let text = url.as_str();
    let rest = text.split_once(':').map_or("", |(_, rest)| rest);
    let rest = rest.strip_prefix("//").unwrap_or(rest);
    let rest = rest.split(['?', '#']).next().unwrap_or("");
    PathBuf::from(percent_decode(rest))
}

fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| char::from(b).to_digit(16);
        match (
            bytes[i],
            bytes.get(i + 1).copied(),
            bytes.get(i + 2).copied(),
        ) {
            (b'%', Some(hi), Some(lo)) if hex(hi).is_some() && hex(lo).is_some() => {
                let value = hex(hi).unwrap_or(0) * 16 + hex(lo).unwrap_or(0);
                out.push(u8::try_from(value).unwrap_or(b'?'));
                i += 3;
            }
            (b, _, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// A bound unix socket; dropping it removes the socket file.
pub struct UnixSocket {
    pub listener: UnixListener,
    path: PathBuf,
}

impl UnixSocket {
    /// Removes a stale socket at `path` (only a socket), then binds it.
    pub fn bind(path: &Path) -> io::Result<UnixSocket> {
        use std::os::unix::fs::FileTypeExt;
        match std::fs::symlink_metadata(path) {
            Ok(meta) if meta.file_type().is_socket() => std::fs::remove_file(path)?,
            // Anything else keeps its place; bind then fails with "address in use".
            Ok(_) => {}
            Err(error) if error.kind() == io::ErrorKind::NotFound => {}
            Err(error) => return Err(error),
        }
        let listener = UnixListener::bind(path)?;
        Ok(UnixSocket {
            listener,
            path: path.to_path_buf(),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for UnixSocket {
    fn drop(&mut self) {
        if let Err(error) = std::fs::remove_file(&self.path) {
            if error.kind() != io::ErrorKind::NotFound {
                tracing::warn!(path = %self.path.display(), %error, "cannot remove the unix socket");
            }
        }
    }
}

/// A TCP or unix connection, before or under TLS.
pub enum NetStream {
    Tcp(TcpStream),
    Unix(UnixStream),
}

impl AsyncRead for NetStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            NetStream::Tcp(s) => Pin::new(s).poll_read(cx, buf),
            NetStream::Unix(s) => Pin::new(s).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for NetStream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            NetStream::Tcp(s) => Pin::new(s).poll_write(cx, buf),
            NetStream::Unix(s) => Pin::new(s).poll_write(cx, buf),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            NetStream::Tcp(s) => Pin::new(s).poll_write_vectored(cx, bufs),
            NetStream::Unix(s) => Pin::new(s).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            NetStream::Tcp(s) => s.is_write_vectored(),
            NetStream::Unix(s) => s.is_write_vectored(),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            NetStream::Tcp(s) => Pin::new(s).poll_flush(cx),
            NetStream::Unix(s) => Pin::new(s).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            NetStream::Tcp(s) => Pin::new(s).poll_shutdown(cx),
            NetStream::Unix(s) => Pin::new(s).poll_shutdown(cx),
        }
    }
}

impl NetStream {
    /// The peer's address; none for a unix socket.
    pub fn peer_addr(&self) -> Option<std::net::SocketAddr> {
        match self {
            NetStream::Tcp(s) => s.peer_addr().ok(),
            NetStream::Unix(_) => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn socket_paths_are_host_and_path_as_in_etcd() {
        let path = |u: &str| socket_path(&Url::parse(u).unwrap());
        assert_eq!(
            path("unix://localhost:2379"),
            PathBuf::from("localhost:2379")
        );
        assert_eq!(
            path("unix:///run/etcd.sock"),
            PathBuf::from("/run/etcd.sock")
        );
        assert_eq!(
            path("unixs:///tmp/a%20b.sock"),
            PathBuf::from("/tmp/a b.sock")
        );
        assert_eq!(path("unix:/tmp/x.sock"), PathBuf::from("/tmp/x.sock"));
        assert_eq!(path("unix://sock.d/x?q#f"), PathBuf::from("sock.d/x"));
    }

    #[tokio::test]
    async fn a_stale_socket_is_replaced_and_removed_on_drop() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.sock");
        // An earlier run's socket, never removed (say the process was killed).
        let stale = std::os::unix::net::UnixListener::bind(&path).unwrap();
        drop(stale);
        assert!(path.exists());
        let socket = UnixSocket::bind(&path).unwrap();
        let _client = UnixStream::connect(&path).await.unwrap();
        drop(socket);
        assert!(!path.exists());
        // A regular file is never removed.
        std::fs::write(&path, b"data").unwrap();
        assert!(UnixSocket::bind(&path).is_err());
        assert_eq!(std::fs::read(&path).unwrap(), b"data");
    }
}
