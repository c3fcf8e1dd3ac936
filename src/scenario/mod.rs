//! The scenario language: a scenario declares a cluster and the steps to run against it.
//!
//! [`parser`] reads the text (and reports `file:line:column` errors), [`model`] is what it produces, and
//! [`template`] is the JSON-with-`$references` used inside statements.

pub mod model;
pub mod parser;
pub mod template;

pub use model::Scenario;
pub use parser::{parse, ParseError};
