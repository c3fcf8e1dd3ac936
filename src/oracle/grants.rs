//! The oracle's own model of who may use which workspace: the grants a world was configured with, as URI
//! strings, narrowed by the revocations the history records. Judged with [`super::uri`], never with
//! `policy::authorization`.

use super::uri;
use std::collections::BTreeMap;

/// Principal → the workspaces granted to it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Grants {
    by_principal: BTreeMap<String, Vec<Workspace>>,
}

/// A granted workspace: its URI as configured, and where that is in the oracle's URI model (read once, not
/// at every question; `None` for a URI the model cannot place, which contains nothing).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Workspace {
    uri: String,
    location: Option<uri::Location>,
}

impl Grants {
    pub fn grant(&mut self, principal: &str, workspace: &str) {
        let workspaces = self.by_principal.entry(principal.to_string()).or_default();
        if !workspaces.iter().any(|w| w.uri == workspace) {
            workspaces.push(Workspace { uri: workspace.to_string(), location: uri::location(workspace) });
        }
    }

    /// Removes the principal's grants at or below `root`.
    pub fn revoke(&mut self, principal: &str, root: &str) {
        if let Some(workspaces) = self.by_principal.get_mut(principal) {
            let root = uri::location(root);
            // A root or workspace the model cannot place contains nothing and is inside nothing: it stays.
            workspaces.retain(|workspace| match (&root, &workspace.location) {
                (Some(root), Some(location)) => !root.contains(location),
                _ => true,
            });
        }
    }

    /// Whether `target` lies inside a workspace granted to `principal` (the target is placed once).
    pub fn may_access(&self, principal: &str, target: &str) -> bool {
        self.may_access_placed(principal, uri::location(target).as_ref())
    }

    /// [`Grants::may_access`] for a target already placed in the URI model (`None`: it cannot be placed, and
    /// lies inside nothing).
    pub fn may_access_placed(&self, principal: &str, target: Option<&uri::Location>) -> bool {
        let (Some(workspaces), Some(target)) = (self.by_principal.get(principal), target) else { return false };
        workspaces.iter().any(|workspace| workspace.location.as_ref().is_some_and(|root| root.contains(target)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grants_narrow_by_revocation_and_judge_by_segments() {
        let mut grants = Grants::default();
        grants.grant("alice", "file:///w/notes");
        grants.grant("alice", "file:///w/archive");
        assert!(grants.may_access("alice", "file:///w/notes/a.md"));
        assert!(!grants.may_access("alice", "file:///w/notes-evil/a.md"));
        assert!(!grants.may_access("bob", "file:///w/notes/a.md"));
        grants.revoke("alice", "file:///w");
        assert!(!grants.may_access("alice", "file:///w/archive/a.md"), "revoking a parent revokes what is below it");
    }

    #[test]
    fn what_the_model_cannot_place_is_inside_nothing_and_contains_nothing() {
        let mut grants = Grants::default();
        grants.grant("alice", "file:///w/notes");
        grants.grant("alice", "https://example.com/notes");
        assert!(!grants.may_access("alice", "not a uri"));
        assert!(!grants.may_access("alice", "https://example.com/notes/a.md"), "an unplaceable workspace contains nothing");
        grants.revoke("alice", "not a uri");
        assert!(grants.may_access("alice", "file:///w/notes/a.md"), "an unplaceable root revokes nothing");
    }
}
