//! The store contract, run against every store kind: memory, SQLite and PostgreSQL must answer every
//! operation the same way, including under concurrency from tasks, connections and separate processes.
//!
//! PostgreSQL tests need `MCPSIM_TEST_POSTGRES_URL` (`eval "$(bash .ci/postgres.sh start)"`); without it they
//! fail under CI and skip loudly elsewhere.

mod contract;
mod memory;
mod postgres;
mod race;
mod sqlite;
mod support;
