//! **Containment** (GUARANTEES.md §4.3): nothing outside a workspace the principal was authorized for at that
//! moment is read, shown or mutated.
//!
//! Judged with the oracle's own URI model and grants: every deleted note, every exported note, and every note
//! URI any answer shows (in a form, a resource listing or read, a tool result, an error message) must lie
//! inside one of the principal's workspaces as of that delivery. What an answer discloses is read from the
//! answer itself: an id is not a location, so a form that says a candidate is "no longer in this workspace"
//! discloses nothing about where it went, and echoing a URI the request itself sent discloses nothing either.

use super::*;
use crate::framework::ports::Note;
use crate::oracle::grants::Grants;
use crate::oracle::uri::{self, Location};

pub(super) fn containment(reading: &Reading<'_>, violations: &mut Vec<Violation>) {
    let history = reading.history;
    // Every note location known so far, in the order the world revealed them (the start, then each listing).
    let mut known: Vec<(usize, &Note)> = history.initial_notes().iter().map(|note| (0, note)).collect();
    for effect in history.effects() {
        if let EffectKind::NotesListed { notes } = &effect.kind {
            known.extend(notes.iter().map(|note| (effect.delivery, note)));
        }
    }
    let location_at = |note_id: &str, delivery: usize| -> Option<&str> {
        known.iter().rev().find(|(at, note)| *at <= delivery && note.id == note_id).map(|(_, note)| note.uri.as_str())
    };
    // Each URI is placed in the oracle's URI model once, however many deletions and answers name it.
    let mut places: BTreeMap<&str, Option<Location>> = BTreeMap::new();
    let mut may_access = |grants: &Grants, principal: &str, uri| {
        grants.may_access_placed(principal, places.entry(uri).or_insert_with(|| uri::location(uri)).as_ref())
    };
    for (effect, mutation) in mutations(history) {
        let Some(operation) = effect.operation.map(|id| reading.operation(id)) else { continue };
        let grants = grants_at(history, effect.delivery);
        let outside: Vec<String> = match &mutation {
            Mutation::Deleted { note_id, uri } => {
                if may_access(&grants, &operation.principal, uri) {
                    Vec::new()
                } else {
                    vec![format!("{note_id} ({uri})")]
                }
            }
            Mutation::Exported(export) => export
                .note_ids
                .iter()
                .filter_map(|id| match location_at(id, effect.delivery) {
                    Some(uri) if may_access(&grants, &operation.principal, uri) => None,
                    Some(uri) => Some(format!("{id} ({uri})")),
                    None => Some(format!("{id} (a note the world never showed)")),
                })
                .collect(),
        };
        for note in outside {
            let verb = if matches!(mutation, Mutation::Deleted { .. }) { "deleted" } else { "exported" };
            violations.push(Violation {
                property: Property::Containment,
                message: format!(
                    "{note} was {verb} for {}, outside every workspace {} may use",
                    label(history, effect.operation),
                    operation.principal
                ),
            });
        }
    }
    // What each answer shows: any known note location it names.
    let mut uris: Vec<&str> = known.iter().map(|(_, note)| note.uri.as_str()).collect();
    uris.sort_unstable();
    uris.dedup();
    let known_uris = KnownUris::new(&uris);
    // The walks' buffers, allocated once for every answer.
    let (mut strings, mut sent, mut pending, mut candidates) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for operation in history.operations() {
        let Outcome::Answered { value, delivery, .. } = &operation.outcome else { continue };
        // Only a string holding the known URIs' common prefix can show one of them.
        reading::strings_into(value, |text| known_uris.may_occur_in(text), &mut strings, &mut pending);
        candidates.clear();
        candidates.extend(strings.iter().flat_map(|text| known_uris.starting_in(text)));
        if candidates.is_empty() {
            continue;
        }
        candidates.sort_unstable();
        candidates.dedup();
        // Echoing what the client itself sent discloses nothing.
        match operation.request_value.as_deref() {
            Some(request) => reading::strings_into(request, |text| known_uris.may_occur_in(text), &mut sent, &mut pending),
            None => sent.clear(),
        }
        let shows = |texts: &[&str], uri: &str| texts.iter().any(|text| reading::shows_uri(text, uri));
        candidates.retain(|uri| shows(&strings, uri) && !shows(&sent, uri));
        if candidates.is_empty() {
            continue;
        }
        let grants = grants_at(history, *delivery);
        for &uri in &candidates {
            if !may_access(&grants, &operation.principal, uri) {
                violations.push(Violation {
                    property: Property::Containment,
                    message: format!(
                        "{} was shown {uri}, outside every workspace {} may use",
                        label(history, Some(operation.id)),
                        operation.principal
                    ),
                });
            }
        }
    }
}

/// The known note URIs, to find which of them a string may show without searching it for each one.
struct KnownUris<'u> {
    /// Sorted and without duplicates.
    uris: &'u [&'u str],
    /// A searcher for their common prefix (`file:///w/` in most scenarios: every occurrence of a known URI
    /// starts with it), built once: most answer strings are short, and building a substring searcher for
    /// each of them cost more than searching.
    finder: memchr::memmem::Finder<'u>,
    /// The lengths the known URIs have, shortest first.
    lengths: Vec<usize>,
}

impl<'u> KnownUris<'u> {
    fn new(uris: &'u [&'u str]) -> KnownUris<'u> {
        let mut lengths: Vec<usize> = uris.iter().map(|uri| uri.len()).collect();
        lengths.sort_unstable();
        lengths.dedup();
        KnownUris { uris, finder: memchr::memmem::Finder::new(common_prefix(uris)), lengths }
    }

    /// Whether any known URI may occur in `text`: whether it holds their common prefix.
    fn may_occur_in(&self, text: &str) -> bool {
        self.finder.find(text.as_bytes()).is_some()
    }

    /// Every known URI that occurs in `text` (starts where the common prefix does and spells out in full),
    /// whether or not a longer URI continues it: [`reading::shows_uri`] decides that.
    fn starting_in<'t>(&'t self, text: &'t str) -> impl Iterator<Item = &'u str> + 't {
        let bytes = text.as_bytes();
        // Every place the common prefix starts, overlapping ones too (`str::find` from one character further on):
        // most strings hold it once or never, and `find` skips the rest fast. An empty prefix starts
        // everywhere, the end included (an empty URI occurs at the end of every text).
        let mut from = Some(0);
        let starts = std::iter::from_fn(move || {
            let start = from? + self.finder.find(text.get(from?..)?.as_bytes())?;
            from = (start < text.len()).then(|| start + text[start..].chars().next().map_or(1, char::len_utf8));
            Some(start)
        });
        starts.flat_map(move |start| {
            self.lengths.iter().filter_map(move |&length| {
                let piece = bytes.get(start..start + length)?;
                let found = self.uris.binary_search_by(|uri| uri.as_bytes().cmp(piece)).ok()?;
                Some(self.uris[found])
            })
        })
    }
}

/// The longest prefix all of `uris` share (a whole character boundary; empty for no URIs).
fn common_prefix<'u>(uris: &[&'u str]) -> &'u str {
    let Some((&first, rest)) = uris.split_first() else { return "" };
    let mut length = first.len();
    for uri in rest {
        length = first.bytes().zip(uri.bytes()).take(length).take_while(|(a, b)| a == b).count();
    }
    while !first.is_char_boundary(length) {
        length -= 1;
    }
    &first[..length]
}

#[cfg(test)]
mod tests {
    use super::{common_prefix, KnownUris};
    use proptest::prelude::*;

    proptest! {
        /// The candidates are exactly the known URIs the text contains, whatever the URIs and the text
        /// (URIs that are prefixes of one another, overlapping occurrences, no common prefix).
        #[test]
        fn the_candidates_are_the_known_uris_a_text_contains(
            mut uris in proptest::collection::vec("(f:/|f:/a|f:/ab|x)[ab/]{0,3}", 0..6),
            pieces in proptest::collection::vec("(f:/|x|a|b|/|é| ){0,2}", 0..12),
        ) {
            let text: String = pieces.concat();
            uris.sort_unstable();
            uris.dedup();
            let uris: Vec<&str> = uris.iter().map(String::as_str).collect();
            let known = KnownUris::new(&uris);
            let mut found: Vec<&str> = known.starting_in(&text).collect();
            found.sort_unstable();
            found.dedup();
            let expected: Vec<&str> = uris.iter().copied().filter(|uri| text.contains(uri)).collect();
            // The filter that keeps an answer's strings never drops one that holds a known URI.
            prop_assert!(expected.is_empty() || known.may_occur_in(&text));
            prop_assert_eq!(found, expected);
        }
    }

    #[test]
    fn the_common_prefix_of_known_uris_is_shared_by_all_of_them() {
        assert_eq!(common_prefix(&[]), "");
        assert_eq!(common_prefix(&["file:///w/a.md"]), "file:///w/a.md");
        assert_eq!(common_prefix(&["file:///w/a.md", "file:///w/b.md", "file:///wx/c.md"]), "file:///w");
        assert_eq!(common_prefix(&["file:///w/a.md", "https://x"]), "");
        // Never inside a character: the prefix is a string.
        assert_eq!(common_prefix(&["file:///\u{e9}", "file:///\u{e8}"]), "file:///");
    }
}
