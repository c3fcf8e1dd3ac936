//! Renderings of a run: [`transcript`] (text, JSON Lines, Mermaid) and [`mcp_trace`] (the client traffic in
//! the independent trace validator's format).

pub mod mcp_trace;
pub mod transcript;
