//! **Mediation** (GUARANTEES.md §4.10; judged when a gateway is in the world): every call a gateway makes on a
//! backend is exactly the qualified tool the client's request named — on the backend that name names, never
//! one that discovery order or a header picked — and runs the descriptor an operator approved for it: the
//! backend's descriptor at the moment of the call equals the approved one (a rug pull that kept the
//! description but changed the schema is not approved).

use super::*;

pub(super) fn mediation(reading: &Reading<'_>, violations: &mut Vec<Violation>) {
    let history = reading.history;
    let mut approved = history.initial_pins().clone();
    for effect in history.effects() {
        match &effect.kind {
            EffectKind::Approved { tool, descriptor } => {
                approved.insert(tool.clone(), descriptor.clone());
            }
            EffectKind::BackendCalled { backend, tool, descriptor } => {
                let qualified = format!("{backend}.{tool}");
                let who = label(history, effect.operation);
                let asked =
                    effect.operation.and_then(|id| reading.operation(id).params()).and_then(|p| p.get("name")).and_then(Value::as_str);
                if asked != Some(qualified.as_str()) {
                    let asked = asked.map(|a| format!("asked for {a:?}")).unwrap_or_else(|| "asked for no tool".into());
                    violations.push(Violation {
                        property: Property::Mediation,
                        message: format!("{who} {asked}, but the gateway called {qualified}"),
                    });
                    continue;
                }
                match (approved.get(&qualified), descriptor) {
                    (Some(pinned), Some(current)) if pinned == current => {}
                    (None, _) => violations.push(Violation {
                        property: Property::Mediation,
                        message: format!("{who}: the gateway called {qualified}, which no operator approved"),
                    }),
                    (Some(_), current) => violations.push(Violation {
                        property: Property::Mediation,
                        message: format!(
                            "{who}: the gateway called {qualified} while the backend published {} — not the descriptor approved",
                            current.as_ref().map(show).unwrap_or_else(|| "no descriptor for it".into())
                        ),
                    }),
                }
            }
            _ => {}
        }
    }
}
