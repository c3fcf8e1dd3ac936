//! The oracle's own model of who may use which workspace: the grants a world was configured with, as URI
//! strings, narrowed by the revocations the history records. Judged with [`super::uri`], never with
//! `policy::authorization`.

use super::uri;
use std::collections::BTreeMap;

/// Principal → the workspace URIs granted to it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Grants {
    by_principal: BTreeMap<String, Vec<String>>,
}

impl Grants {
    pub fn grant(&mut self, principal: &str, workspace: &str) {
        let workspaces = self.by_principal.entry(principal.to_string()).or_default();
        if !workspaces.iter().any(|w| w == workspace) {
            workspaces.push(workspace.to_string());
        }
    }

    /// Removes the principal's grants at or below `root`.
    pub fn revoke(&mut self, principal: &str, root: &str) {
        if let Some(workspaces) = self.by_principal.get_mut(principal) {
            workspaces.retain(|workspace| !uri::inside(root, workspace));
        }
    }

    /// Whether `target` lies inside a workspace granted to `principal`.
    pub fn may_access(&self, principal: &str, target: &str) -> bool {
        self.by_principal.get(principal).is_some_and(|workspaces| workspaces.iter().any(|w| uri::inside(w, target)))
    }

    pub fn principals(&self) -> impl Iterator<Item = (&str, &[String])> {
        self.by_principal.iter().map(|(p, w)| (p.as_str(), w.as_slice()))
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
}
