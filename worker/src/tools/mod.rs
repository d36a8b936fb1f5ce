//! What every worker offers without `--fixtures`, one module per family.
//!
//! - [`adr_templates`]: architecture decision record templates (Nygard, MADR), as prompts that
//!   draft an ADR and as resources a client can read.

pub mod adr_templates;
pub mod adrs;

use crate::tool::ToolRegistry;

/// Adds every built-in offer to `registry`.
pub fn register(registry: &mut ToolRegistry) {
    adr_templates::register(registry);
}
