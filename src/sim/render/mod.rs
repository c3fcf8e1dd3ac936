//! Renderings of a run: [`transcript`] (text, JSON Lines, Mermaid), [`compact`] (text for a terminal),
//! [`mcp_trace`] (the client traffic in the independent trace validator's format) and, with the `html`
//! feature, `html` (self-contained pages of a run, an index of runs, and an exploration with its coverage).

pub mod compact;
#[cfg(feature = "html")]
pub mod html;
pub mod mcp_trace;
pub mod transcript;
