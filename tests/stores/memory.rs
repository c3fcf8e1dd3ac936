//! The contract against the in-memory stores (the reference the databases must match).

use crate::contract::{contract_tests, out_of_band_contract_tests, StoreKind};
use async_trait::async_trait;
use mcpsim::testing::StoreSpec;

struct MemoryKind;

#[async_trait]
impl StoreKind for MemoryKind {
    async fn fresh(&self) -> StoreSpec {
        StoreSpec::Memory
    }
}

contract_tests!(MemoryKind);
out_of_band_contract_tests!(MemoryKind);
