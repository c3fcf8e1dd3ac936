//! `mcpsim record`: wiring for the recording proxy (`--http`) and wrapper (`--stdio`) of `crate::record`.

use super::common::{parse_url, EXIT_FAILED, EXIT_USAGE};
use crate::record::{self, Bounds, FieldPath, Recorder, Redactor, Summary, Transport};
use std::io::{Read, Write};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use tokio::sync::watch;

const AFTER_HELP: &str = "\
Examples:
  mcpsim record --http --upstream http://127.0.0.1:8080/mcp --out session.jsonl
      # a proxy on 127.0.0.1 (a free port); its URL on stdout: point the client there
  mcpsim record --stdio --out session.jsonl -- mcpsim serve --stdio
      # give this whole command to the client as its server command
  mcpsim record --http --upstream http://127.0.0.1:8080/mcp --listen 127.0.0.1:9000 --out s.jsonl \\
      --redact-header X-Tenant-Key --redact-field params.arguments.password

The file is an mcp-trace (JSON Lines, mcp-trace-capture 0.6.0's format), each event written and
flushed as it happens: judge it with `mcp-trace-validator validate FILE`, make it a scenario with
`mcpsim import FILE`. Never written: the values of Authorization, Cookie, Set-Cookie, X-Api-Key, of
the headers named by --redact-header and of the fields named by --redact-field (each becomes
<redacted:HEX>, the same marker for the same secret in one file, from a key drawn for this recording
and never written). Headers other than the MCP ones (docs/recording.md lists them) are not recorded
at all.
--http stops on Ctrl-C, SIGTERM, or the end of its stdin when stdin is a pipe or a terminal. --stdio
ends with its session: the client closes mcpsim's stdin (the server gets 2 s to exit, then it is
killed), the server exits, or Ctrl-C/SIGTERM (SIGTERM to the server, SIGKILL 2 s later).
Exit status: --http 0 once stopped with the file complete, 1 if it could not be written whole;
--stdio the server's status (128+N if signal N ended it or mcpsim); 2 on a usage error.";

/// Record a real client's traffic with a real server as an mcp-trace file (HTTP proxy or stdio wrapper).
#[derive(Debug, clap::Args)]
#[command(after_help = AFTER_HELP)]
#[command(group = clap::ArgGroup::new("mode").required(true).args(["http", "stdio"]))]
pub struct RecordArgs {
    /// A reverse proxy on a loopback address in front of --upstream.
    #[arg(long)]
    pub http: bool,
    /// A wrapper around the server command given after `--`.
    #[arg(long)]
    pub stdio: bool,
    /// (--http) The server's URL, e.g. http://127.0.0.1:8080/mcp (host:port alone: its /mcp).
    #[arg(long, value_name = "URL")]
    pub upstream: Option<String>,
    /// (--http) Where the proxy listens, loopback only; port 0: a free one [default: 127.0.0.1:0]
    #[arg(long, value_name = "ADDR")]
    pub listen: Option<String>,
    /// The trace file to write (created with mode 600).
    #[arg(long, value_name = "FILE")]
    pub out: PathBuf,
    /// Overwrite --out if it exists.
    #[arg(long)]
    pub force: bool,
    /// A header whose value is secret (any case; repeatable): recorded as a marker.
    #[arg(long = "redact-header", value_name = "NAME")]
    pub redact_header: Vec<String>,
    /// A secret JSON field of the messages (repeatable), e.g. params.arguments.password.
    ///
    /// Keys from the message's root joined by dots: `*` is any one key or array index,
    ///
    /// `\.` a dot inside a key (`params._meta.com\.example/auth.token`). None by default.
    #[arg(long = "redact-field", value_name = "PATH", value_parser = FieldPath::parse)]
    pub redact_field: Vec<FieldPath>,
    /// Most bytes of the file: past it, recording stops (a last event says so), not forwarding
    #[arg(long, value_name = "N", default_value_t = record::MAX_BYTES_DEFAULT)]
    pub max_bytes: u64,
    /// Most bytes of one message as written: a larger one becomes a smaller message with a marker.
    #[arg(long, value_name = "N", default_value_t = record::MAX_MESSAGE_BYTES_DEFAULT)]
    pub max_message_bytes: usize,
    /// (--stdio) The server command and its arguments, after `--`.
    #[arg(last = true, value_name = "COMMAND")]
    pub command: Vec<String>,
}

fn usage(message: impl std::fmt::Display) -> ExitCode {
    eprintln!("mcpsim record: {message}");
    ExitCode::from(EXIT_USAGE)
}

/// `--listen`: an IP address and port on loopback.
fn parse_listen(text: &str) -> Result<SocketAddr, String> {
    let address: SocketAddr = text
        .trim()
        .parse()
        .map_err(|_| format!("--listen {text:?} is not an address and port; write e.g. 127.0.0.1:0 (port 0 picks a free one)"))?;
    if !address.ip().is_loopback() {
        return Err(format!(
            "--listen {address}: refusing a non-loopback address. The proxy forwards the client's credentials and records its traffic, so it listens on loopback only: use 127.0.0.1:PORT or [::1]:PORT"
        ));
    }
    Ok(address)
}

pub fn run(args: RecordArgs) -> ExitCode {
    let checked = check(&args);
    let (mode, bounds) = match checked {
        Ok(checked) => checked,
        Err(message) => return usage(message),
    };
    let file = match create(&args.out, args.force) {
        Ok(file) => file,
        Err(message) => return usage(message),
    };
    let transport = if matches!(mode, Mode::Http { .. }) { Transport::StreamableHttp } else { Transport::Stdio };
    let redactor = Redactor::new(&args.redact_header, args.redact_field.clone());
    let recorder = Arc::new(Recorder::new(Box::new(file), transport, redactor, bounds));
    let runtime = match tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build() {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("mcpsim record: cannot start the async runtime: {error}");
            return ExitCode::from(EXIT_FAILED);
        }
    };
    let code = match mode {
        Mode::Http { upstream, listen } => runtime.block_on(run_http(&args.out, upstream, listen, recorder)),
        Mode::Stdio => runtime.block_on(run_stdio(&args.out, &args.command, recorder)),
    };
    // A pump may still be blocked reading stdin on the runtime's blocking thread: not waited for.
    runtime.shutdown_background();
    ExitCode::from(code)
}

enum Mode {
    Http { upstream: hyper::Uri, listen: SocketAddr },
    Stdio,
}

fn check(args: &RecordArgs) -> Result<(Mode, Bounds), String> {
    if args.max_bytes < record::MAX_BYTES_MIN {
        return Err(format!(
            "--max-bytes {} is too small: at least {} (room for the events and the last one)",
            args.max_bytes,
            record::MAX_BYTES_MIN
        ));
    }
    if args.max_message_bytes < record::MAX_MESSAGE_BYTES_MIN {
        return Err(format!("--max-message-bytes {} is too small: at least {}", args.max_message_bytes, record::MAX_MESSAGE_BYTES_MIN));
    }
    if args.out.as_os_str() == "-" {
        return Err("--out - would be a file named `-` (stdout carries the session in --stdio): give the trace a path".into());
    }
    let bounds = Bounds { max_bytes: args.max_bytes, max_message_bytes: args.max_message_bytes };
    if args.http {
        if !args.command.is_empty() {
            return Err(format!("--http takes no server command (got `{}` after --): the server is --upstream", args.command.join(" ")));
        }
        let Some(upstream) = &args.upstream else {
            return Err("--http needs --upstream URL, the server to put the proxy in front of (e.g. http://127.0.0.1:8080/mcp)".into());
        };
        let upstream: hyper::Uri = parse_url(upstream)
            .map_err(|message| format!("--upstream {message}"))?
            .parse()
            .map_err(|error| format!("--upstream: {error}"))?;
        let listen = parse_listen(args.listen.as_deref().unwrap_or("127.0.0.1:0"))?;
        return Ok((Mode::Http { upstream, listen }, bounds));
    }
    if args.upstream.is_some() || args.listen.is_some() {
        return Err("--upstream and --listen are for --http; --stdio wraps the server command given after --".into());
    }
    if args.command.is_empty() {
        return Err("--stdio needs the server command after `--`, e.g. mcpsim record --stdio --out t.jsonl -- mcpsim serve --stdio".into());
    }
    Ok((Mode::Stdio, bounds))
}

/// The trace file, mode 600: new, or truncated under `--force`.
fn create(path: &Path, force: bool) -> Result<std::fs::File, String> {
    use std::os::unix::fs::OpenOptionsExt;
    let mut options = std::fs::OpenOptions::new();
    options.write(true).mode(0o600);
    if force {
        options.create(true).truncate(true);
    } else {
        options.create_new(true);
    }
    options.open(path).map_err(|error| match error.kind() {
        std::io::ErrorKind::AlreadyExists => {
            format!(
                "{} exists; it is not appended to (its seq numbers would restart): --force overwrites it, or name another --out",
                path.display()
            )
        }
        _ => format!("cannot create {}: {error}", path.display()),
    })
}

/// Sends the signal's number on SIGINT, SIGTERM or SIGHUP.
fn watch_signals(sender: watch::Sender<Option<i32>>) {
    tokio::spawn(async move {
        let Ok(mut terminate) = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) else { return };
        let Ok(mut interrupt) = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt()) else { return };
        let Ok(mut hangup) = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()) else { return };
        let signal = tokio::select! {
            _ = interrupt.recv() => libc::SIGINT,
            _ = terminate.recv() => libc::SIGTERM,
            // The terminal or session that started the recording went away.
            _ = hangup.recv() => libc::SIGHUP,
        };
        let _ = sender.send(Some(signal));
    });
}

/// Whether stdin is something whose end means "stop": a pipe, a socket or a terminal (not /dev/null or a file,
/// as a background job started by a script has).
fn stdin_can_end_the_run() -> bool {
    let Ok(stat) = rustix::fs::fstat(std::io::stdin()) else { return false };
    let kind = rustix::fs::FileType::from_raw_mode(stat.st_mode);
    // SAFETY: isatty(3) on descriptor 0 only asks the kernel about it.
    matches!(kind, rustix::fs::FileType::Fifo | rustix::fs::FileType::Socket) || unsafe { libc::isatty(0) == 1 }
}

async fn run_http(out: &Path, upstream: hyper::Uri, listen: SocketAddr, recorder: Arc<Recorder>) -> u8 {
    let listener = match tokio::net::TcpListener::bind(listen).await {
        Ok(listener) => listener,
        Err(error) => {
            eprintln!("mcpsim record: cannot listen on {listen}: {error}. Choose another --listen port (0 picks a free one)");
            let _ = std::fs::remove_file(out);
            return EXIT_FAILED;
        }
    };
    let local = match listener.local_addr() {
        Ok(local) => local,
        Err(error) => {
            eprintln!("mcpsim record: cannot read the bound address: {error}");
            return EXIT_FAILED;
        }
    };
    let path = upstream.path_and_query().map_or("/mcp", |path| path.as_str());
    let url = format!("http://{local}{path}");
    let (sender, stop) = watch::channel(None::<i32>);
    watch_signals(sender.clone());
    let watching_stdin = stdin_can_end_the_run();
    if watching_stdin {
        let sender = sender.clone();
        // A plain thread: reading stdin blocks, and this one is never waited for.
        let _ = std::thread::Builder::new().name("mcpsim-record-stdin".into()).spawn(move || {
            let mut sink = [0u8; 4096];
            let mut stdin = std::io::stdin().lock();
            while matches!(stdin.read(&mut sink), Ok(read) if read > 0) {}
            let _ = sender.send(Some(0));
        });
    }
    // The URL alone on stdout, for a script; the sentence on stderr, for a person.
    println!("{url}");
    let _ = std::io::stdout().flush();
    eprintln!(
        "mcpsim record: listening on {url}, forwarding to {upstream}, recording to {} (Ctrl-C or SIGTERM{} stops it)",
        out.display(),
        if watching_stdin { ", or the end of stdin," } else { "" }
    );
    let (stopping_sender, stopping) = watch::channel(false);
    let mut stop_for_proxy = stop.clone();
    tokio::spawn(async move {
        let _ = stop_for_proxy.wait_for(Option::is_some).await;
        let _ = stopping_sender.send(true);
    });
    let served = record::http::serve(listener, &upstream, recorder.clone(), stopping).await;
    let summary = recorder.close(record::Direction::ClientToServer, record::Lifecycle::Close);
    if let Err(error) = served {
        eprintln!("mcpsim record: the proxy failed: {error}");
        report(out, &summary);
        return EXIT_FAILED;
    }
    report(out, &summary)
}

async fn run_stdio(out: &Path, command: &[String], recorder: Arc<Recorder>) -> u8 {
    let (sender, stop) = watch::channel(None::<i32>);
    watch_signals(sender);
    eprintln!("mcpsim record: recording {} to {}", command.join(" "), out.display());
    match record::stdio::wrap(command, recorder, stop).await {
        Ok(ended) => {
            eprintln!("mcpsim record: {}", ended.how);
            let written = report(out, &ended.summary);
            if written != 0 && ended.code == 0 {
                return written;
            }
            ended.code
        }
        Err(message) => {
            eprintln!("mcpsim record: {message}");
            let _ = std::fs::remove_file(out);
            EXIT_USAGE
        }
    }
}

/// The closing lines on stderr; 1 if the file is incomplete for a write error, else 0.
fn report(out: &Path, summary: &Summary) -> u8 {
    let mut notes = Vec::new();
    if summary.truncated_messages > 0 {
        notes.push(format!("{} message(s) over --max-message-bytes written truncated", summary.truncated_messages));
    }
    if summary.not_json > 0 {
        notes.push(format!("{} body/line(s) not JSON forwarded unrecorded", summary.not_json));
    }
    if summary.unheld > 0 {
        notes.push(format!("{} message(s) too large to hold forwarded unrecorded", summary.unheld));
    }
    if let Some(seq) = summary.stopped_at {
        notes.push(format!("the file reached --max-bytes at seq {seq}; {} event(s) after it not written", summary.dropped));
    }
    let notes = if notes.is_empty() { String::new() } else { format!(" ({})", notes.join("; ")) };
    if let Some(error) = &summary.error {
        eprintln!(
            "mcpsim record: the recording {} is incomplete: {} event(s) written, {} lost after a write failed ({error}){notes}",
            out.display(),
            summary.events,
            summary.dropped
        );
        return EXIT_FAILED;
    }
    eprintln!(
        "mcpsim record: wrote {} event(s), {} bytes, to {}{notes}; judge it with `mcp-trace-validator validate {}`",
        summary.events,
        summary.bytes,
        out.display(),
        out.display()
    );
    0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_loopback_is_listened_on() {
        assert!(parse_listen("127.0.0.1:0").is_ok());
        assert!(parse_listen("[::1]:9000").is_ok());
        let refused = parse_listen("0.0.0.0:8080").unwrap_err();
        assert!(refused.contains("non-loopback") && refused.contains("127.0.0.1:PORT"), "{refused}");
        assert!(parse_listen("192.168.1.4:80").is_err());
        assert!(parse_listen("localhost").unwrap_err().contains("not an address"));
    }
}
