//! What the project's own tests, benchmarks and examples reach below the facade, re-exported by name: the
//! layer modules are private to the crate, so this list is everything outside code can name besides the
//! facade of `lib.rs`. Hidden from the documentation and not the library's interface: nothing here is
//! promised to stay. A test that needs one more item adds it to its group here, deliberately.

// The wire: reasons, errors, headers, `_meta` keys and bounds a test sends or compares.
pub use crate::wire::canonical::digest_hex;
pub use crate::wire::headers::RoutingHeaders;
pub use crate::wire::jsonrpc::MESSAGE_BYTES_MAX;
pub use crate::wire::meta::{KEY_CLIENT_CAPABILITIES, KEY_CLIENT_INFO, KEY_PROTOCOL_VERSION, KEY_SERVER_INFO};
pub use crate::wire::{Reason, RpcError};

// Policy: the file URIs, the key ring and the state it seals, the pins and the descriptor scanner.
pub use crate::policy::authorization::Authorizations;
pub use crate::policy::containment::FileUri;
pub use crate::policy::pinning::{changes as pin_changes, Approval, PinFile};
pub use crate::policy::scanner::{scan_descriptor, FindingLabel};
pub use crate::policy::state::{KeyRing, StateClaims, STATE_CHARS_MAX};

// The framework: the pipeline a test drives a server through, and the ports the stores implement.
pub use crate::framework::out_of_band::{Completion, FlowStart, FlowStatus, OutOfBandFlow};
pub use crate::framework::ports::{
    fold_title, note_index_key, ClaimAndDelete, ClaimOutcome, ClaimRecord, Clock, GuardedDelete, NonceClaim, NonceSource, Note, NoteStore,
    ReplayStore, StoreError,
};
pub use crate::framework::{handle_decoded_exchange, handle_exchange, handle_message, Exchange, Reply, RequestContext, Service};

// The servers: the notes server, the conformance fixture, the gateway and its backends and ports.
pub use crate::servers::fixture::{ConformanceFixture, FixtureConfig, PNG_BASE64};
pub use crate::servers::gateway::audit::AuditRecord;
pub use crate::servers::gateway::backends::{ExportRecord, LiveDescriptors, NotesBackend};
pub use crate::servers::gateway::policy::{AccessPolicy, ToolGrant};
pub use crate::servers::gateway::ports::{
    listing_from_result, AuditSink, Backend, BackendCall, BackendError, LocalBackend, PinSource, RateLimit, ToolListing,
};
pub use crate::servers::gateway::{BackendHandle, Gateway};
pub use crate::servers::notes::{NotesConfig, NotesServer, CANDIDATES_MAX};

// The stores: opening one from its spec, the memory and database stores, the deterministic and system ports.
pub use crate::stores::database::{Durability, Migration, MigrationReport};
pub use crate::stores::deterministic::{ManualClock, SeededNonces};
pub use crate::stores::feed::MemoryChangeFeed;
pub use crate::stores::gateway::{MemoryAuditSink, MemoryExportLedger};
pub use crate::stores::memory::{MemoryNoteStore, MemoryReplayStore, ReplayLimits, MEMORY_REPLAY_BYTES_PER_NONCE};
pub use crate::stores::out_of_band::{OutOfBandLimits, OUT_OF_BAND_GRACE_MS};
#[cfg(feature = "postgres")]
pub use crate::stores::postgres::{PostgresStore, FIND_CANDIDATES_BY_TRIGRAMS as POSTGRES_FIND_BY_TRIGRAMS, POSTGRES_MIGRATIONS};
#[cfg(feature = "postgres")]
pub use crate::stores::spec::PostgresTarget;
pub use crate::stores::spec::{open_with_durability, open_with_limits};
#[cfg(feature = "sqlite")]
pub use crate::stores::sqlite::{SqliteStore, SQLITE_MIGRATIONS};
pub use crate::stores::system::{OsNonces, SystemClock};
pub use crate::stores::{open, SeedReport, StoreAdmin, StoreSpec, Stores};

/// The folder note store's confinement, which `tests/stores/dir.rs` attacks from outside.
#[cfg(unix)]
pub mod dir {
    pub use crate::stores::dir::{note_path, DirStore, Refusal, Resolver, Seam, NOTE_BYTES_MAX, STATE_DIR};
}

// Configuration and assembly: the demo deployment, the gateway's file and pins, servers built over ports.
pub use crate::assembly::{gateway_world, notes_server, GatewayWorld, WorldOptions};
pub use crate::config::deployment::server_info;
pub use crate::config::gateway::{default_pins, GatewayFile};
pub use crate::config::{Deployment, DEMO_TOML};
pub use crate::servers::notes::NotesPorts;

// What a run recorded and the checker that judges it.
pub use crate::oracle::check::check_properties;
pub use crate::oracle::history::NoResponse;
pub use crate::oracle::history::{Attempt, EffectKind, History, Outcome};
pub use crate::oracle::outcome::{Code, ErrorReason, Kind};

/// Scenarios parsed under a name of the caller's choosing (the facade's `parse` takes it from the origin).
pub mod scenario {
    pub use crate::scenario::parse;
}

// The simulator below the facade's `Options`: instances with a server of the test's making, faults, transcripts.
pub use crate::sim::actors::gateway_mutants::GatewayVariant;
pub use crate::sim::actors::instance::{notes_server_factory, InstanceParts, ServiceFactory};
pub use crate::sim::engine::faults::Fault;
pub use crate::sim::engine::message::OperationId;
pub use crate::sim::render::transcript::Entry;

/// One run with every option of the runner (a replayed decision log, a server factory, statelessness off).
pub mod runner {
    pub use crate::sim::runner::{run, FailureKind, RunOptions, RunReport, SchedulerChoice};
}

/// Explorations with a server factory of the test's making, one seed at a time, and exhaustive orders.
pub mod explore {
    pub use crate::sim::explore::{explore, explore_with_coverage, fault_plan, run_seed, run_seed_with, SeedOutcome};

    pub mod exhaustive {
        pub use crate::sim::explore::exhaustive::{explore_every_order, explore_exhaustively};
    }
}

/// The mutant zoo.
pub mod mutants {
    pub use crate::sim::explore::mutants::{find, Mutant, MUTANTS};
}

/// The embedded scenario library, every file.
pub mod library {
    pub use crate::sim::library::SCENARIOS;
}

// The binary's pieces a benchmark or an attack test needs: the HTTP header deadline, the sandbox.
#[cfg(feature = "cli")]
pub use crate::transport::{http::HEADER_READ_TIMEOUT_MS, Stopwatch};

/// `serve --sandbox`'s Landlock plan, which `tests/sandbox.rs` applies in a child and attacks.
#[cfg(feature = "cli")]
pub mod sandbox {
    pub use crate::cli::sandbox::{apply, kernel_abi, SandboxMode, SandboxOutcome, SandboxPlan};
}
