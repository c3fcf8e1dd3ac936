//! **Liveness** (GUARANTEES.md §4.9; judged when clients retry, i.e. under faults): once faults stop, every
//! request gets an answer, and no confirmation stays "in progress": a confirmed delete completes, exactly once
//! (at most once is its own property), and its client learns that it did.

use super::*;

pub(super) fn liveness(reading: &Reading<'_>, violations: &mut Vec<Violation>) {
    let history = reading.history;
    let all_mutations = mutations(history);
    for operation in history.operations() {
        let first = operation.id;
        if history.attempts().contains_key(&first) || operation.notification || history.stranded().contains(&first) {
            continue;
        }
        let attempts = history.attempts_of(first);
        let settled = history.settled(first);
        let Some(response) = settled.response() else {
            violations.push(Violation {
                property: Property::Liveness,
                message: format!(
                    "{} got no answer in {} attempt(s), though faults had stopped",
                    label(history, Some(first)),
                    attempts.len()
                ),
            });
            continue;
        };
        // A mutation this request's own attempts made must reach its client: the last answer reports it,
        // directly or as the outcome of the used confirmation (an expired state is the one excuse: the design
        // promises the recovery only while the state lives).
        let made = || {
            all_mutations
                .iter()
                .filter(|(effect, _)| effect.operation.is_some_and(|id| attempts.contains(&id)))
                .map(|(_, mutation)| mutation)
        };
        let reported = reported(response);
        let expired = matches!(reading::reason(response), Some(reading::STATE_EXPIRED | reading::REPLAY_WINDOW_CLOSED));
        let learned = matches!(reported, Some(Reported::Deletion(_) | Reported::Export(_)));
        if !expired && !learned && made().next().is_some() {
            let made: Vec<String> = made().map(Mutation::describe).collect();
            violations.push(Violation {
                property: Property::Liveness,
                message: format!(
                    "{} {} but its client never learned it: the last of its {} attempt(s) was answered {}",
                    label(history, Some(first)),
                    made.join(", "),
                    attempts.len(),
                    show(response)
                ),
            });
            continue;
        }
        if matches!(reported, Some(Reported::InProgress)) {
            violations.push(Violation {
                property: Property::Liveness,
                message: format!(
                    "{}: its confirmation was still \"in progress\" after {} attempt(s); its outcome never settled",
                    label(history, Some(first)),
                    attempts.len()
                ),
            });
        }
    }
}
