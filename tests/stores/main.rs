//! The store contract, run against every store kind: memory, SQLite, PostgreSQL and the directory store must answer every
//! operation the same way, including under concurrency from tasks, connections and separate processes.
//!
//! The PostgreSQL tests are `#[ignore]`d (reported as ignored by `cargo test`): run them with
//! `eval "$(bash .ci/postgres.sh start)"` and `cargo test --test stores -- --ignored postgres` (CI does, in a
//! stage of its own); asked to run without `MCPSIM_TEST_POSTGRES_URL`, they fail.

mod contract;
#[cfg(unix)]
mod dir;
mod memory;
mod postgres;
mod race;
mod sqlite;
mod support;
