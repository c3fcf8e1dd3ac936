//! `mcpsim record --stdio -- COMMAND ARGS…`: a wrapper around a server command. The client talks to mcpsim's
//! stdin and stdout, mcpsim to the child's; bytes pass through as they are read (never held for a whole line),
//! and each newline-ended line is recorded, with its direction, before the chunk that completes it is passed on.
//! The child's stderr is the wrapper's (passed through untouched).
//!
//! The child runs in its own process group (its own children with it), dies with mcpsim (`PR_SET_PDEATHSIG`),
//! and the group is killed when the session ends: the client closed its end (after [`CLIENT_GONE_GRACE`] for
//! the server to exit by itself), mcpsim was told to stop (SIGTERM to the group, then SIGKILL after
//! [`STOP_GRACE`]), or the server exited (whatever it left behind).

use super::{Direction, Framer, Lifecycle, Piece, Recorder, Summary, HELD_BYTES_MAX};
use std::os::unix::process::ExitStatusExt;
use std::process::{ExitStatus, Stdio};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::watch;

/// How long a server has to exit by itself once its client closed the session (its stdin ends).
pub const CLIENT_GONE_GRACE: Duration = Duration::from_secs(2);
/// How long a server has to exit after SIGTERM when mcpsim is told to stop, before SIGKILL.
pub const STOP_GRACE: Duration = Duration::from_secs(2);
/// How long the server's last output may take to drain once it exited (a grandchild may hold its stdout).
const DRAIN_MAX: Duration = Duration::from_secs(2);

/// How a wrapped session ended.
#[derive(Debug)]
pub struct Ended {
    /// The status to exit with: the server's, or 128 + the signal that ended it (or that stopped mcpsim).
    pub code: u8,
    /// In words, for stderr.
    pub how: String,
    pub summary: Summary,
}

/// Starts `argv` and relays between it and this process's stdin/stdout until the session ends. `stop` turns
/// to `Some(signal)` when mcpsim is told to stop.
pub async fn wrap(argv: &[String], recorder: Arc<Recorder>, mut stop: watch::Receiver<Option<i32>>) -> Result<Ended, String> {
    let Some((program, args)) = argv.split_first() else {
        return Err("no server command: write it after `--`, e.g. mcpsim record --stdio --out t.jsonl -- mcpsim serve --stdio".into());
    };
    let mut command = tokio::process::Command::new(program);
    command.args(args).stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::inherit()).process_group(0).kill_on_drop(true);
    // SAFETY: prctl(2) in the child between fork and exec touches no memory of the parent's.
    unsafe {
        command.pre_exec(|| {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            Ok(())
        });
    }
    let mut child =
        command.spawn().map_err(|error| format!("cannot start {program:?}: {error} (is it on PATH? give its path otherwise)"))?;
    let group = child.id().map(|pid| pid as i32);
    let (Some(child_stdin), Some(child_stdout)) = (child.stdin.take(), child.stdout.take()) else {
        return Err("the server's stdin and stdout were not piped".into());
    };
    recorder.lifecycle(Direction::ClientToServer, Lifecycle::Open);
    let mut client = tokio::spawn(pump(tokio::io::stdin(), child_stdin, Direction::ClientToServer, recorder.clone()));
    let mut server = tokio::spawn(pump(child_stdout, tokio::io::stdout(), Direction::ServerToClient, recorder.clone()));

    enum End {
        Exited(std::io::Result<ExitStatus>),
        ClientGone,
        Stopped(i32),
    }
    // The client's end is looked at first: a client that closed its end while the server was exiting
    // (because of it) ended the session. A client pump that stopped because the server's stdin failed says
    // nothing of the client: the server's exit is waited for then.
    let end = tokio::select! {
        biased;
        ended = &mut client => match ended {
            Ok(PumpEnd::SourceClosed) => End::ClientGone,
            _ => End::Exited(child.wait().await),
        },
        status = child.wait() => End::Exited(status),
        signal = stop.wait_for(Option::is_some) => End::Stopped(signal.ok().and_then(|signal| *signal).unwrap_or(libc::SIGTERM)),
    };
    let (status, closer, stopped_by) = match end {
        End::Exited(status) => (status, Direction::ServerToClient, None),
        End::ClientGone => {
            // The client's end closed, and so did the server's stdin: a server normally exits now.
            let status = match tokio::time::timeout(CLIENT_GONE_GRACE, child.wait()).await {
                Ok(status) => status,
                Err(_) => {
                    signal_group(group, libc::SIGKILL);
                    child.wait().await
                }
            };
            (status, Direction::ClientToServer, None)
        }
        End::Stopped(signal) => {
            signal_group(group, libc::SIGTERM);
            let status = match tokio::time::timeout(STOP_GRACE, child.wait()).await {
                Ok(status) => status,
                Err(_) => {
                    signal_group(group, libc::SIGKILL);
                    child.wait().await
                }
            };
            (status, Direction::ClientToServer, Some(signal))
        }
    };
    // What the server wrote before it ended reaches the client and the trace before the closing event.
    if tokio::time::timeout(DRAIN_MAX, &mut server).await.is_err() {
        server.abort();
    }
    client.abort();
    // Whatever the server left running in its group goes with it.
    signal_group(group, libc::SIGKILL);
    let status = status.map_err(|error| format!("waiting for the server failed: {error}"))?;
    let event = if status.success() && stopped_by.is_none() { Lifecycle::Close } else { Lifecycle::Abort };
    let summary = recorder.close(closer, event);
    let (code, how) = match (stopped_by, status.code(), status.signal()) {
        (Some(signal), _, _) => (128 + signal as u8, format!("stopped by signal {signal}; the server {}", describe(status))),
        (None, Some(code), _) => (code as u8, format!("the server {}", describe(status))),
        (None, None, Some(signal)) => (128 + signal as u8, format!("the server {}", describe(status))),
        (None, None, None) => (1, format!("the server {}", describe(status))),
    };
    let how =
        if closer == Direction::ClientToServer && stopped_by.is_none() { format!("the client closed the session; {how}") } else { how };
    Ok(Ended { code, how, summary })
}

fn describe(status: ExitStatus) -> String {
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exited with status {code}"),
        (None, Some(signal)) => format!("was killed by signal {signal}"),
        (None, None) => "ended".into(),
    }
}

fn signal_group(group: Option<i32>, signal: libc::c_int) {
    if let Some(group) = group.filter(|group| *group > 0) {
        // SAFETY: kill(2) with a negative pid signals a process group; it touches no memory of ours.
        unsafe {
            libc::kill(-group, signal);
        }
    }
}

/// Copies `from` to `to` chunk by chunk, recording each line a chunk completes before passing the chunk on.
/// Ends at the end of `from` (closing `to`) or when either side fails.
/// Why a pump stopped.
enum PumpEnd {
    /// Its source ended (or failed): for the client's pump, the client closed its end.
    SourceClosed,
    /// Writing to the other side failed: that side is gone.
    SinkFailed,
}

async fn pump(mut from: impl AsyncRead + Unpin, mut to: impl AsyncWrite + Unpin, direction: Direction, recorder: Arc<Recorder>) -> PumpEnd {
    let mut lines = Framer::new(HELD_BYTES_MAX);
    let mut buffer = vec![0u8; 64 * 1024];
    let record = |piece: Piece| match piece {
        Piece::Line(line) => recorder.message(direction, &line),
        Piece::Unheld(bytes) => recorder.unheld(direction, bytes),
    };
    loop {
        let read = match from.read(&mut buffer).await {
            Ok(0) | Err(_) => {
                lines.finish().into_iter().for_each(record);
                let _ = to.shutdown().await;
                return PumpEnd::SourceClosed;
            }
            Ok(read) => read,
        };
        lines.push(&buffer[..read]).into_iter().for_each(record);
        if to.write_all(&buffer[..read]).await.is_err() || to.flush().await.is_err() {
            return PumpEnd::SinkFailed;
        }
    }
}
