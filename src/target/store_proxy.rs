//! The store proxy: a TCP proxy on a loopback port between a target's instances and their PostgreSQL database,
//! owned by the fleet, so that mcpsim can cut the store at a chosen moment (an outage mid-claim) or stall it.
//!
//! Each connection an instance opens is forwarded to the upstream database byte for byte, on two threads (one
//! per direction). The frontend direction is read as PostgreSQL messages (the startup message and its
//! SSL/GSS/cancel requests have no type byte; every later message is a type byte and a length), and the
//! statements are counted: `Q` (a simple query) and `E` (an Execute of the extended protocol). A connection
//! that starts TLS is forwarded unread and counts nothing.
//!
//! On command ([`StoreProxy::arm_cut`]) the proxy lets `N` more statements through; when statement `N + 1`
//! arrives it is not forwarded: every connection is closed on both sides, and new connections are refused (a
//! reset) for a window or until [`StoreProxy::heal`]. [`StoreProxy::stall`] stops forwarding in both
//! directions instead. mcpsim's decisions are the counts; when the server sends its statements, and so which
//! of its operations the cut falls in, is the server's own timing.
//!
//! Dropping the proxy (also while a panic unwinds) closes every connection and the listening port and joins
//! every thread it started.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Duration;

/// How long the proxy waits for the upstream database to accept a connection.
const UPSTREAM_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Most connections forwarded at once (a server's pool is far smaller).
pub const CONNECTIONS_MAX: usize = 256;
/// The protocol codes of the untyped messages that precede the startup message.
const SSL_REQUEST: u32 = 80_877_103;
const GSSENC_REQUEST: u32 = 80_877_104;
const CANCEL_REQUEST: u32 = 80_877_102;

/// Why the proxy could not start.
#[derive(Debug, thiserror::Error)]
pub enum ProxyError {
    #[error("[store] upstream = {upstream:?}: {why}")]
    Upstream { upstream: String, why: String },
    #[error("the store proxy cannot listen on 127.0.0.1: {0}")]
    Listen(std::io::Error),
}

/// How long new connections are refused after a cut.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outage {
    /// For this long, then accepted again.
    For(Duration),
    /// Until [`StoreProxy::heal`].
    UntilHealed,
}

/// What the proxy has done so far.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProxyCounts {
    /// Statements forwarded (`Q` and `E` messages).
    pub statements: u64,
    /// Cuts carried out.
    pub cuts: u32,
    /// Connections closed by cuts.
    pub connections_cut: u32,
    /// Connections refused while the store was out.
    pub refused: u32,
    /// Statements still let through before an armed cut (`None`: none armed).
    pub armed: Option<u32>,
    /// Connections open now.
    pub open: usize,
}

#[derive(Default)]
struct State {
    stopping: bool,
    /// Open connections: both sockets (clones), to close them from outside their threads.
    connections: BTreeMap<u64, (TcpStream, TcpStream)>,
    next_id: u64,
    counts: ProxyCounts,
    refusing: bool,
    stalled: bool,
    /// Bumped by each cut, stall and heal, so an older window's timer does not end a newer one.
    epoch: u64,
    threads: Vec<JoinHandle<()>>,
}

struct Shared {
    state: Mutex<State>,
    changed: Condvar,
    upstream: SocketAddr,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Closes every connection (both sides) and refuses new ones.
    fn cut(&self, state: &mut State) {
        for (client, upstream) in state.connections.values() {
            let _ = client.shutdown(Shutdown::Both);
            let _ = upstream.shutdown(Shutdown::Both);
        }
        state.counts.connections_cut += state.connections.len() as u32;
        state.counts.cuts += 1;
        state.counts.armed = None;
        state.refusing = true;
        self.changed.notify_all();
    }
}

/// The proxy: listening on `127.0.0.1:port` until dropped.
pub struct StoreProxy {
    port: u16,
    shared: Arc<Shared>,
    listener: Option<JoinHandle<()>>,
}

/// The `host:port` a `[store] upstream` names: itself, or a `postgres://` URL's (default port 5432).
pub fn upstream_address(upstream: &str) -> Result<String, String> {
    let authority = match upstream.split_once("://") {
        Some((scheme, rest)) if scheme == "postgres" || scheme == "postgresql" => {
            let authority = &rest[..rest.find(['/', '?']).unwrap_or(rest.len())];
            authority.rsplit_once('@').map_or(authority, |(_, host)| host)
        }
        Some((scheme, _)) => return Err(format!("the scheme {scheme:?} is not postgres:// (or host:port)")),
        None => upstream,
    };
    if authority.is_empty() {
        return Err("it names no host".into());
    }
    let has_port = authority.rsplit_once(':').is_some_and(|(host, port)| !host.is_empty() && port.parse::<u16>().is_ok());
    Ok(if has_port { authority.to_string() } else { format!("{authority}:5432") })
}

/// `upstream` (a `postgres://` URL) with its host and port replaced by the proxy's: what the instances connect
/// to. A plain `host:port` upstream becomes `postgres://127.0.0.1:PORT`.
pub fn proxied_url(upstream: &str, port: u16) -> String {
    let Some((scheme, rest)) = upstream.split_once("://") else { return format!("postgres://127.0.0.1:{port}") };
    let end = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(end);
    let userinfo = authority.rsplit_once('@').map(|(user, _)| format!("{user}@")).unwrap_or_default();
    format!("{scheme}://{userinfo}127.0.0.1:{port}{tail}")
}

impl StoreProxy {
    /// Listens on a free loopback port and forwards every connection to `upstream` (`host:port` or a
    /// `postgres://` URL).
    pub fn start(upstream: &str) -> Result<StoreProxy, ProxyError> {
        let refused = |why: String| ProxyError::Upstream { upstream: super::redact_argv(&[upstream.to_string()]), why };
        let address = upstream_address(upstream).map_err(refused)?;
        let upstream = address
            .to_socket_addrs()
            .map_err(|e| refused(format!("cannot resolve {address}: {e}")))?
            .next()
            .ok_or_else(|| refused(format!("{address} resolves to no address")))?;
        let listener = TcpListener::bind("127.0.0.1:0").map_err(ProxyError::Listen)?;
        let port = listener.local_addr().map_err(ProxyError::Listen)?.port();
        let shared = Arc::new(Shared { state: Mutex::new(State::default()), changed: Condvar::new(), upstream });
        let accepting = shared.clone();
        let listener = std::thread::Builder::new()
            .name("mcpsim-store-proxy".into())
            .spawn(move || accept_loop(&accepting, listener))
            .map_err(ProxyError::Listen)?;
        Ok(StoreProxy { port, shared, listener: Some(listener) })
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// Lets `after_statements` more statements through, then closes every connection when the next one
    /// arrives (not forwarding it) and refuses new connections for `outage`.
    pub fn arm_cut(&self, after_statements: u32, outage: Outage) {
        let mut state = self.shared.lock();
        state.counts.armed = Some(after_statements);
        state.epoch += 1;
        let epoch = state.epoch;
        if let Outage::For(window) = outage {
            // The window starts at the cut: the timer waits for it, then for the window.
            let shared = self.shared.clone();
            let timer = std::thread::Builder::new().name("mcpsim-store-window".into()).spawn(move || {
                let state = shared.lock();
                let state =
                    shared.changed.wait_while(state, |s| !s.stopping && s.epoch == epoch && !s.refusing).unwrap_or_else(|p| p.into_inner());
                if state.stopping || state.epoch != epoch {
                    return;
                }
                let (mut state, _) = shared
                    .changed
                    .wait_timeout_while(state, window, |s| !s.stopping && s.epoch == epoch)
                    .unwrap_or_else(|p| p.into_inner());
                if !state.stopping && state.epoch == epoch {
                    state.refusing = false;
                    shared.changed.notify_all();
                }
            });
            if let Ok(timer) = timer {
                state.threads.push(timer);
            }
        }
    }

    /// Stops forwarding in both directions (connections stay open) for `window`, or until [`StoreProxy::heal`].
    // No statement stalls the store yet (`store cut` is the lessons' fault); tested here for the drawn plans to come.
    #[allow(dead_code)]
    pub fn stall(&self, window: Option<Duration>) {
        let mut state = self.shared.lock();
        state.stalled = true;
        state.epoch += 1;
        let epoch = state.epoch;
        if let Some(window) = window {
            let shared = self.shared.clone();
            let timer = std::thread::Builder::new().name("mcpsim-store-window".into()).spawn(move || {
                let state = shared.lock();
                let (mut state, _) = shared
                    .changed
                    .wait_timeout_while(state, window, |s| !s.stopping && s.epoch == epoch)
                    .unwrap_or_else(|p| p.into_inner());
                if !state.stopping && state.epoch == epoch {
                    state.stalled = false;
                    shared.changed.notify_all();
                }
            });
            if let Ok(timer) = timer {
                state.threads.push(timer);
            }
        }
    }

    /// Ends an outage or a stall now and disarms a cut not yet carried out.
    pub fn heal(&self) {
        let mut state = self.shared.lock();
        state.refusing = false;
        state.stalled = false;
        state.counts.armed = None;
        state.epoch += 1;
        self.shared.changed.notify_all();
    }

    pub fn counts(&self) -> ProxyCounts {
        let state = self.shared.lock();
        ProxyCounts { open: state.connections.len(), ..state.counts.clone() }
    }
}

impl Drop for StoreProxy {
    fn drop(&mut self) {
        {
            let mut state = self.shared.lock();
            state.stopping = true;
            for (client, upstream) in state.connections.values() {
                let _ = client.shutdown(Shutdown::Both);
                let _ = upstream.shutdown(Shutdown::Both);
            }
            self.shared.changed.notify_all();
        }
        // The accept loop wakes on this connection, sees `stopping` and returns, closing the listener.
        let _ = TcpStream::connect_timeout(&SocketAddr::from(([127, 0, 0, 1], self.port)), Duration::from_secs(1));
        if let Some(listener) = self.listener.take() {
            let _ = listener.join();
        }
        // Connections accepted meanwhile were refused (the loop checks `stopping` first); their threads and the
        // timers end on the shutdowns and the notify above.
        let threads = std::mem::take(&mut self.shared.lock().threads);
        for thread in threads {
            let _ = thread.join();
        }
    }
}

/// Closes a socket with a reset (SO_LINGER 0), as a refused connection.
fn reset(stream: TcpStream) {
    let linger = libc::linger { l_onoff: 1, l_linger: 0 };
    use std::os::fd::AsRawFd;
    // SAFETY: setsockopt on a socket we own, with a pointer to a live `linger` of the size passed.
    unsafe {
        libc::setsockopt(
            stream.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_LINGER,
            (&linger as *const libc::linger).cast(),
            size_of::<libc::linger>() as libc::socklen_t,
        );
    }
    drop(stream);
}

fn accept_loop(shared: &Arc<Shared>, listener: TcpListener) {
    for client in listener.incoming() {
        let Ok(client) = client else { continue };
        let mut state = shared.lock();
        if state.stopping {
            reset(client);
            return;
        }
        if state.refusing || state.connections.len() >= CONNECTIONS_MAX {
            state.counts.refused += 1;
            drop(state);
            reset(client);
            continue;
        }
        drop(state);
        let Ok(upstream) = TcpStream::connect_timeout(&shared.upstream, UPSTREAM_CONNECT_TIMEOUT) else {
            reset(client);
            continue;
        };
        let _ = client.set_nodelay(true);
        let _ = upstream.set_nodelay(true);
        let (Ok(client_copy), Ok(upstream_copy), Ok(client_back), Ok(upstream_back)) =
            (client.try_clone(), upstream.try_clone(), client.try_clone(), upstream.try_clone())
        else {
            continue;
        };
        let mut state = shared.lock();
        if state.stopping || state.refusing {
            // Cut or stopped while the upstream connection was made.
            let _ = upstream.shutdown(Shutdown::Both);
            drop(state);
            reset(client);
            if shared.lock().stopping {
                return;
            }
            continue;
        }
        let id = state.next_id;
        state.next_id += 1;
        state.connections.insert(id, (client_copy, upstream_copy));
        let (to_server, to_client) = (shared.clone(), shared.clone());
        let frontend = std::thread::Builder::new()
            .name("mcpsim-store-frontend".into())
            .spawn(move || forward_frontend(&to_server, id, client, upstream));
        let backend = std::thread::Builder::new()
            .name("mcpsim-store-backend".into())
            .spawn(move || forward_plain(&to_client, id, upstream_back, client_back));
        state.threads.extend(frontend.into_iter().chain(backend));
        // Threads of closed connections are joined now and then, so a long play does not pile them up.
        let (done, running): (Vec<_>, Vec<_>) = std::mem::take(&mut state.threads).into_iter().partition(JoinHandle::is_finished);
        state.threads = running;
        drop(state);
        for thread in done {
            let _ = thread.join();
        }
    }
}

/// Waits while the proxy is stalled; `false` once it is stopping.
fn wait_unstalled(shared: &Shared) -> bool {
    let state = shared.lock();
    let state = shared.changed.wait_while(state, |s| s.stalled && !s.stopping).unwrap_or_else(|p| p.into_inner());
    !state.stopping
}

fn close(shared: &Shared, id: u64) {
    let mut state = shared.lock();
    if let Some((client, upstream)) = state.connections.remove(&id) {
        let _ = client.shutdown(Shutdown::Both);
        let _ = upstream.shutdown(Shutdown::Both);
    }
}

/// The database's answers, back to the instance.
fn forward_plain(shared: &Shared, id: u64, mut from: TcpStream, mut to: TcpStream) {
    let mut buffer = vec![0u8; 16 * 1024];
    loop {
        let read = match from.read(&mut buffer) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        if !wait_unstalled(shared) || to.write_all(&buffer[..read]).is_err() {
            break;
        }
    }
    close(shared, id);
}

/// Where the frontend parser is in the message stream.
enum Frontend {
    /// Before the startup message: untyped messages (length, code).
    Untyped,
    /// After it: typed messages (type byte, length).
    Typed,
    /// TLS: forwarded unread.
    Opaque,
}

/// The instance's messages, to the database: counted, and cut when an armed count runs out.
fn forward_frontend(shared: &Shared, id: u64, mut from: TcpStream, mut to: TcpStream) {
    let mut phase = Frontend::Untyped;
    let mut header: Vec<u8> = Vec::with_capacity(8);
    // Body bytes of the current message still to forward.
    let mut body_left: u64 = 0;
    let mut buffer = vec![0u8; 16 * 1024];
    'reading: loop {
        let read = match from.read(&mut buffer) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        if !wait_unstalled(shared) {
            break;
        }
        let mut rest = &buffer[..read];
        while !rest.is_empty() {
            if matches!(phase, Frontend::Opaque) {
                if to.write_all(rest).is_err() {
                    break 'reading;
                }
                break;
            }
            if body_left > 0 {
                let take = rest.len().min(usize::try_from(body_left).unwrap_or(usize::MAX));
                if to.write_all(&rest[..take]).is_err() {
                    break 'reading;
                }
                body_left -= take as u64;
                rest = &rest[take..];
                continue;
            }
            if matches!(phase, Frontend::Untyped) && header.is_empty() && rest[0] == 0x16 {
                // A TLS ClientHello after an accepted SSLRequest.
                phase = Frontend::Opaque;
                continue;
            }
            let wanted = if matches!(phase, Frontend::Untyped) { 8 } else { 5 };
            let take = (wanted - header.len()).min(rest.len());
            header.extend_from_slice(&rest[..take]);
            rest = &rest[take..];
            if header.len() < wanted {
                continue;
            }
            let (length, statement) = match phase {
                Frontend::Untyped => {
                    let length = u32::from_be_bytes([header[0], header[1], header[2], header[3]]);
                    let code = u32::from_be_bytes([header[4], header[5], header[6], header[7]]);
                    if !matches!(code, SSL_REQUEST | GSSENC_REQUEST | CANCEL_REQUEST) {
                        phase = Frontend::Typed;
                    }
                    (u64::from(length).saturating_sub(8), false)
                }
                _ => {
                    let length = u32::from_be_bytes([header[1], header[2], header[3], header[4]]);
                    (u64::from(length).saturating_sub(4), matches!(header[0], b'Q' | b'E'))
                }
            };
            if statement {
                let mut state = shared.lock();
                match state.counts.armed {
                    Some(0) => {
                        // This statement is not forwarded: the store is cut before it.
                        shared.cut(&mut state);
                        break 'reading;
                    }
                    Some(left) => state.counts.armed = Some(left - 1),
                    None => {}
                }
                state.counts.statements += 1;
            }
            if to.write_all(&header).is_err() {
                break 'reading;
            }
            header.clear();
            body_left = length;
        }
    }
    close(shared, id);
}

/// A SQLite file's write lock (`BEGIN IMMEDIATE`), held by mcpsim on a thread of its own for a window: the
/// store fault of a SQLite target. Released when the window ends or when dropped (also on panic), whichever
/// comes first.
#[cfg(feature = "sqlite")]
pub struct SqliteLock {
    release: Option<std::sync::mpsc::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

#[cfg(feature = "sqlite")]
impl SqliteLock {
    /// Takes the lock now (waiting up to 5 s for a writer to finish) and holds it for `window`.
    pub fn hold(path: &std::path::Path, window: Duration) -> Result<SqliteLock, String> {
        let shown = path.display().to_string();
        let connection = rusqlite::Connection::open_with_flags(path, rusqlite::OpenFlags::SQLITE_OPEN_READ_WRITE)
            .map_err(|e| format!("[store] path = {shown:?}: cannot open the SQLite file: {e}"))?;
        connection.busy_timeout(Duration::from_secs(5)).map_err(|e| e.to_string())?;
        connection.execute_batch("BEGIN IMMEDIATE").map_err(|e| format!("{shown}: cannot take the write lock: {e}"))?;
        let (release, released) = std::sync::mpsc::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("mcpsim-sqlite-lock".into())
            .spawn(move || {
                let _ = released.recv_timeout(window);
                let _ = connection.execute_batch("ROLLBACK");
            })
            .map_err(|e| e.to_string())?;
        Ok(SqliteLock { release: Some(release), thread: Some(thread) })
    }
}

#[cfg(feature = "sqlite")]
impl Drop for SqliteLock {
    fn drop(&mut self) {
        if let Some(release) = self.release.take() {
            let _ = release.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Weak;

    /// A fake database: accepts connections and echoes every byte back.
    fn echo_server() -> (u16, JoinHandle<()>) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let thread = std::thread::spawn(move || {
            for stream in listener.incoming().take(8) {
                let Ok(mut stream) = stream else { continue };
                std::thread::spawn(move || {
                    let mut copy = stream.try_clone().unwrap();
                    let _ = std::io::copy(&mut stream, &mut copy);
                });
            }
        });
        (port, thread)
    }

    fn startup() -> Vec<u8> {
        let mut message = 8u32.to_be_bytes().to_vec();
        message.extend_from_slice(&196_608u32.to_be_bytes());
        message
    }

    fn typed(kind: u8, body: &[u8]) -> Vec<u8> {
        let mut message = vec![kind];
        message.extend_from_slice(&(body.len() as u32 + 4).to_be_bytes());
        message.extend_from_slice(body);
        message
    }

    fn refuses(port: u16) -> bool {
        match TcpStream::connect(("127.0.0.1", port)) {
            Err(_) => true,
            // Accepted by the kernel, then reset or closed by the proxy: reading ends at once.
            Ok(mut stream) => {
                stream.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
                let _ = stream.write_all(&startup());
                let mut byte = [0u8; 1];
                !matches!(stream.read(&mut byte), Ok(1))
            }
        }
    }

    #[test]
    fn upstreams_are_read_as_host_port_or_a_url_and_the_url_is_proxied() {
        assert_eq!(upstream_address("db:5433").unwrap(), "db:5433");
        assert_eq!(upstream_address("postgres://u:p@127.0.0.1:54329/x?sslmode=disable").unwrap(), "127.0.0.1:54329");
        assert_eq!(upstream_address("postgresql://db/x").unwrap(), "db:5432");
        assert!(upstream_address("http://db:1").unwrap_err().contains("not postgres://"));
        assert_eq!(proxied_url("postgres://u:p@db:5432/x?a=b", 7), "postgres://u:p@127.0.0.1:7/x?a=b");
        assert_eq!(proxied_url("db:5432", 7), "postgres://127.0.0.1:7");
    }

    #[test]
    fn statements_are_counted_and_the_cut_falls_before_the_one_past_the_count() {
        let (port, _server) = echo_server();
        let proxy = StoreProxy::start(&format!("127.0.0.1:{port}")).unwrap();
        let mut stream = TcpStream::connect(("127.0.0.1", proxy.port())).unwrap();
        stream.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        // The startup, a parse (not a statement), a simple query and an execute, split across writes.
        let mut bytes = startup();
        bytes.extend(typed(b'P', b"\0SELECT 1\0\0\0"));
        bytes.extend(typed(b'Q', b"BEGIN\0"));
        bytes.extend(typed(b'E', b"\0\0\0\0\0"));
        for chunk in bytes.chunks(3) {
            stream.write_all(chunk).unwrap();
        }
        let mut echoed = vec![0u8; bytes.len()];
        stream.read_exact(&mut echoed).unwrap();
        assert_eq!(echoed, bytes);
        assert_eq!(proxy.counts().statements, 2);
        proxy.arm_cut(1, Outage::UntilHealed);
        let one = typed(b'Q', b"SELECT 1\0");
        stream.write_all(&one).unwrap();
        let mut back = vec![0u8; one.len()];
        stream.read_exact(&mut back).unwrap();
        stream.write_all(&typed(b'Q', b"COMMIT\0")).unwrap();
        let mut byte = [0u8; 1];
        assert!(!matches!(stream.read(&mut byte), Ok(1)), "the connection is cut before COMMIT is forwarded");
        let counts = proxy.counts();
        assert_eq!((counts.statements, counts.cuts, counts.connections_cut), (3, 1, 1));
        assert!(refuses(proxy.port()), "new connections are refused while the store is out");
        proxy.heal();
        let mut again = TcpStream::connect(("127.0.0.1", proxy.port())).unwrap();
        again.write_all(&startup()).unwrap();
        let mut back = [0u8; 8];
        again.read_exact(&mut back).unwrap();
        assert_eq!(back.to_vec(), startup());
    }

    #[test]
    fn an_outage_with_a_window_ends_by_itself() {
        let (port, _server) = echo_server();
        let proxy = StoreProxy::start(&format!("127.0.0.1:{port}")).unwrap();
        proxy.arm_cut(0, Outage::For(Duration::from_millis(200)));
        let mut stream = TcpStream::connect(("127.0.0.1", proxy.port())).unwrap();
        stream.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        stream.write_all(&startup()).unwrap();
        let mut back = [0u8; 8];
        stream.read_exact(&mut back).unwrap();
        stream.write_all(&typed(b'Q', b"BEGIN\0")).unwrap();
        let mut byte = [0u8; 1];
        assert!(!matches!(stream.read(&mut byte), Ok(1)));
        // Healed by the window's timer (polled; bounded at 5 s).
        let healed = (0..100).any(|_| {
            std::thread::sleep(Duration::from_millis(50));
            !refuses(proxy.port())
        });
        assert!(healed, "the store is reachable again after its window");
    }

    #[test]
    fn a_stall_holds_bytes_until_healed() {
        let (port, _server) = echo_server();
        let proxy = StoreProxy::start(&format!("127.0.0.1:{port}")).unwrap();
        let mut stream = TcpStream::connect(("127.0.0.1", proxy.port())).unwrap();
        stream.write_all(&startup()).unwrap();
        let mut back = [0u8; 8];
        stream.read_exact(&mut back).unwrap();
        proxy.stall(None);
        stream.write_all(&typed(b'Q', b"x\0")).unwrap();
        stream.set_read_timeout(Some(Duration::from_millis(300))).unwrap();
        let mut byte = [0u8; 1];
        assert!(stream.read(&mut byte).is_err(), "nothing comes back while stalled");
        proxy.heal();
        stream.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let mut back = [0u8; 7];
        stream.read_exact(&mut back).unwrap();
        assert_eq!(back[0], b'Q');
    }

    #[cfg(feature = "sqlite")]
    #[test]
    fn a_sqlite_lock_keeps_writers_out_for_its_window_and_is_released_on_drop() {
        let dir = std::env::temp_dir().join(format!("mcpsim-sqlite-lock-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("x.db");
        let writer = rusqlite::Connection::open(&path).unwrap();
        writer.execute_batch("CREATE TABLE t (x INTEGER)").unwrap();
        writer.busy_timeout(Duration::from_millis(50)).unwrap();
        let lock = SqliteLock::hold(&path, Duration::from_secs(60)).unwrap();
        assert!(writer.execute_batch("INSERT INTO t VALUES (1)").is_err(), "the write lock is held");
        drop(lock);
        writer.execute_batch("INSERT INTO t VALUES (1)").unwrap();
        let _lock = SqliteLock::hold(&path, Duration::from_millis(100)).unwrap();
        writer.busy_timeout(Duration::from_secs(5)).unwrap();
        writer.execute_batch("INSERT INTO t VALUES (2)").expect("the lock ends with its window");
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// The proxy's threads hold the shared state: once it is gone, every thread has ended.
    fn started_with_a_connection() -> (StoreProxy, u16, Weak<Shared>, TcpStream) {
        let (port, _server) = echo_server();
        let proxy = StoreProxy::start(&format!("127.0.0.1:{port}")).unwrap();
        proxy.arm_cut(5, Outage::For(Duration::from_secs(60)));
        let mut stream = TcpStream::connect(("127.0.0.1", proxy.port())).unwrap();
        stream.write_all(&startup()).unwrap();
        let mut back = [0u8; 8];
        stream.read_exact(&mut back).unwrap();
        let (port, weak) = (proxy.port(), Arc::downgrade(&proxy.shared));
        (proxy, port, weak, stream)
    }

    #[test]
    fn dropping_the_proxy_closes_its_port_its_connections_and_its_threads() {
        let (proxy, port, weak, mut stream) = started_with_a_connection();
        drop(proxy);
        assert!(weak.upgrade().is_none(), "a thread of the proxy is still running");
        assert!(TcpStream::connect(("127.0.0.1", port)).is_err(), "the port still listens");
        stream.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let mut byte = [0u8; 1];
        assert!(!matches!(stream.read(&mut byte), Ok(1)), "the connection was closed");
    }

    #[test]
    fn a_panic_while_the_proxy_runs_closes_it_too() {
        let (weak, port) = {
            let caught = std::panic::catch_unwind(|| {
                let (_proxy, port, weak, _stream) = started_with_a_connection();
                std::panic::panic_any((weak, port));
            });
            *caught.unwrap_err().downcast::<(Weak<Shared>, u16)>().unwrap()
        };
        assert!(weak.upgrade().is_none(), "a thread of the proxy outlived the panic");
        assert!(TcpStream::connect(("127.0.0.1", port)).is_err(), "the port still listens after the panic");
    }
}
