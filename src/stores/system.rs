//! The real clock and the OS nonce source, used only by the real servers (never by the simulator).

use crate::framework::ports::{Clock, NonceSource};
use rand_core::{OsRng, RngCore};

/// Wall-clock milliseconds since the Unix epoch.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    #[allow(clippy::disallowed_methods)] // The one sanctioned wall-clock read; simulation code never reaches it.
    fn now_ms(&self) -> u64 {
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0)
    }
}

/// Nonces from the operating system's CSPRNG.
#[derive(Debug, Default, Clone, Copy)]
pub struct OsNonces;

impl NonceSource for OsNonces {
    fn nonce(&self) -> [u8; 16] {
        let mut bytes = [0u8; 16];
        OsRng.fill_bytes(&mut bytes);
        bytes
    }
}

/// A fresh random 32-byte key (for instances started without a configured key).
pub fn random_key() -> Vec<u8> {
    let mut key = vec![0u8; 32];
    OsRng.fill_bytes(&mut key);
    key
}
