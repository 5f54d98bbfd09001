//! The network path from the harness to one twin guest's SSH server: a
//! loopback TCP relay that can drop every open connection at once, as a
//! network partition would (the SSH-drop fault).

use std::sync::{Arc, Mutex};

use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

pub struct SshRelay {
    pub port: u16,
    conns: Arc<Mutex<Vec<JoinHandle<()>>>>,
    accept: JoinHandle<()>,
}

impl SshRelay {
    /// Relays a free loopback port to `127.0.0.1:upstream`.
    pub async fn start(upstream: u16) -> std::io::Result<SshRelay> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let port = listener.local_addr()?.port();
        let conns: Arc<Mutex<Vec<JoinHandle<()>>>> = Arc::default();
        let c = conns.clone();
        let accept = tokio::spawn(async move {
            while let Ok((mut client, _)) = listener.accept().await {
                let h = tokio::spawn(async move {
                    if let Ok(mut guest) = TcpStream::connect(("127.0.0.1", upstream)).await {
                        let _ = tokio::io::copy_bidirectional(&mut client, &mut guest).await;
                    }
                });
                let mut v = c.lock().unwrap();
                v.retain(|h| !h.is_finished());
                v.push(h);
            }
        });
        Ok(SshRelay {
            port,
            conns,
            accept,
        })
    }

    /// Drops every open connection (both sockets close); new connections
    /// are still relayed. Returns how many were open.
    pub fn sever(&self) -> usize {
        let mut v = self.conns.lock().unwrap();
        let open = v.iter().filter(|h| !h.is_finished()).count();
        for h in v.drain(..) {
            h.abort();
        }
        open
    }
}

impl Drop for SshRelay {
    fn drop(&mut self) {
        self.accept.abort();
        self.sever();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[tokio::test]
    async fn relays_and_severs() {
        let echo = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let up = echo.local_addr().unwrap().port();
        tokio::spawn(async move {
            while let Ok((mut s, _)) = echo.accept().await {
                tokio::spawn(async move {
                    let mut b = [0u8; 64];
                    while let Ok(n) = s.read(&mut b).await {
                        if n == 0 || s.write_all(&b[..n]).await.is_err() {
                            break;
                        }
                    }
                });
            }
        });
        let relay = SshRelay::start(up).await.unwrap();
        let mut c = TcpStream::connect(("127.0.0.1", relay.port)).await.unwrap();
        c.write_all(b"ping").await.unwrap();
        let mut b = [0u8; 4];
        c.read_exact(&mut b).await.unwrap();
        assert_eq!(&b, b"ping");
        assert_eq!(relay.sever(), 1);
        let mut rest = Vec::new();
        // The relay's side is gone: EOF (or a reset), never more data.
        let r = c.read_to_end(&mut rest).await;
        assert!(r.is_err() || rest.is_empty());
        // A new connection still works.
        let mut c = TcpStream::connect(("127.0.0.1", relay.port)).await.unwrap();
        c.write_all(b"pong").await.unwrap();
        c.read_exact(&mut b).await.unwrap();
        assert_eq!(&b, b"pong");
    }
}
