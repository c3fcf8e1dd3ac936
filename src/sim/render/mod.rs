//! Renderings of a run: [`transcript`] (text, JSON Lines, Mermaid), [`compact`] (text for a terminal),
//! [`mcp_trace`] (the client traffic in the independent trace validator's format) and, with the `html`
//! feature, `html` (self-contained pages of a run, an index of runs, and an exploration with its coverage).

pub mod compact;
#[cfg(feature = "html")]
pub mod html;
pub mod mcp_trace;
pub mod transcript;

use transcript::{Format, Transcript};

impl Transcript {
    /// The transcript in `format`. Dispatched here, above the three renderers, so that the compact and mcp-trace
    /// renderings can read the transcript without the transcript reaching back into them.
    pub fn render(&self, format: Format) -> String {
        match format {
            Format::Text => self.to_text(),
            Format::Compact => compact::render(self),
            Format::Jsonl => self.to_jsonl(),
            Format::Mermaid => self.to_mermaid(),
            Format::McpTrace => mcp_trace::render(self),
        }
    }
}
