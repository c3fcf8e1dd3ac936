//! Principal → authorized workspaces. A URI in the arguments authorizes nothing by itself (GUARANTEES.md §1.1).

use super::containment::{FileUri, UriError};
use std::collections::BTreeMap;

/// Server configuration: which workspace roots each authenticated principal may use.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Authorizations {
    workspaces: BTreeMap<String, Vec<FileUri>>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub(crate) enum AuthorizationError {
    #[error("the workspace URI is not acceptable: {0}")]
    Uri(UriError),
    #[error("the workspace is not authorized for this principal")]
    Unauthorized,
}

impl Authorizations {
    pub fn new() -> Self {
        Self::default()
    }

    /// Grants `principal` the workspace rooted at `root` (which must be a valid file URI).
    pub fn grant(&mut self, principal: &str, root: &str) -> Result<(), UriError> {
        let root = FileUri::parse(root)?;
        let roots = self.workspaces.entry(principal.to_string()).or_default();
        if !roots.contains(&root) {
            roots.push(root);
        }
        Ok(())
    }

    /// Removes every grant of `principal` at or below `root`.
    pub fn revoke(&mut self, principal: &str, root: &FileUri) {
        if let Some(roots) = self.workspaces.get_mut(principal) {
            roots.retain(|r| !root.contains(r));
        }
    }

    pub fn roots(&self, principal: &str) -> &[FileUri] {
        self.workspaces.get(principal).map(Vec::as_slice).unwrap_or(&[])
    }

    pub fn principals(&self) -> impl Iterator<Item = &str> {
        self.workspaces.keys().map(String::as_str)
    }

    /// Accepts `requested` only if it normalizes to an authorized root or a folder inside one.
    /// Returns the normalized requested workspace.
    pub(crate) fn authorize_workspace(&self, principal: &str, requested: &str) -> Result<FileUri, AuthorizationError> {
        let requested = FileUri::parse(requested).map_err(AuthorizationError::Uri)?;
        if self.roots(principal).iter().any(|root| root.contains(&requested)) {
            Ok(requested)
        } else {
            Err(AuthorizationError::Unauthorized)
        }
    }

    /// Whether `principal` may read the (normalized) `target` at all.
    pub(crate) fn may_access(&self, principal: &str, target: &FileUri) -> bool {
        self.roots(principal).iter().any(|root| root.contains(target))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn demo() -> Authorizations {
        let mut a = Authorizations::new();
        a.grant("alice", "file:///Users/alice/Documents/Notes").unwrap();
        a.grant("bob", "file:///Users/bob/Notes").unwrap();
        a
    }

    #[test]
    fn own_workspace_and_subfolders_are_authorized() {
        let a = demo();
        assert_eq!(
            a.authorize_workspace("alice", "file:///Users/alice/Documents/Notes").unwrap().to_string(),
            "file:///Users/alice/Documents/Notes"
        );
        assert!(a.authorize_workspace("alice", "file:///Users/alice/Documents/Notes/2024").is_ok());
        assert!(a.authorize_workspace("alice", "file://localhost/Users/alice/Documents/Notes/").is_ok());
    }

    #[test]
    fn other_principals_workspaces_and_escapes_are_not() {
        let a = demo();
        assert_eq!(a.authorize_workspace("alice", "file:///Users/bob/Notes"), Err(AuthorizationError::Unauthorized));
        assert_eq!(a.authorize_workspace("alice", "file:///Users/alice/Documents/Notes-evil"), Err(AuthorizationError::Unauthorized));
        assert_eq!(a.authorize_workspace("alice", "file:///Users/alice/Documents/Notes/%2e%2e"), Err(AuthorizationError::Unauthorized));
        assert_eq!(
            a.authorize_workspace("alice", "file:///Users/alice/Documents/Notes/../../../bob/Notes"),
            Err(AuthorizationError::Unauthorized)
        );
        assert_eq!(a.authorize_workspace("alice", "file:///Users/alice/Documents"), Err(AuthorizationError::Unauthorized));
        assert_eq!(a.authorize_workspace("mallory", "file:///Users/alice/Documents/Notes"), Err(AuthorizationError::Unauthorized));
        assert_eq!(a.authorize_workspace("alice", "https://x/y"), Err(AuthorizationError::Uri(UriError::NotFile)));
    }

    #[test]
    fn revocation_removes_access() {
        let mut a = demo();
        a.revoke("alice", &FileUri::parse("file:///Users/alice").unwrap());
        assert_eq!(a.authorize_workspace("alice", "file:///Users/alice/Documents/Notes"), Err(AuthorizationError::Unauthorized));
        assert!(a.authorize_workspace("bob", "file:///Users/bob/Notes").is_ok());
    }
}
