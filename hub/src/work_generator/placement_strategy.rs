//! What of a Placement its Works carry: its applyStrategy, as the work generator's cache of
//! placements has it, and a value that changes only when that does (the placement's other
//! changes, its status above all, are not its Works' concern).

use std::hash::{Hash, Hasher};

use super::*;

/// `placement`'s applyStrategy, if it sets one.
fn of(placement: &Placement) -> Option<&ApplyStrategy> {
    placement.spec.strategy.as_ref()?.apply_strategy.as_ref()
}

/// The applyStrategy of `binding`'s placement (none while the placement is not known: a
/// Work written meanwhile is rewritten once the cache has it).
pub(super) async fn apply_strategy(ctx: &Context, binding: &Binding) -> Option<ApplyStrategy> {
    let name = &binding.spec.placement_name;
    if !fleethub_runtime::ready_within(CACHE_WAIT, || ctx.placements.wait_until_ready()).await {
        tracing::debug!(placement = %name, "placement cache not ready; Work written without its applyStrategy");
    }
    let placement = ctx.placements.get(&ObjectRef::new(name))?;
    of(&placement).cloned()
}

/// What of `placement` its Works carry, as a value that changes when that does: its
/// applyStrategy, and its uid (a placement deleted and made again under the same name is new,
/// and its Bindings may have been written while the cache did not show it yet).
pub(super) fn apply_strategy_version(placement: &Placement) -> Option<u64> {
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    placement.metadata.uid.hash(&mut hasher);
    serde_json::to_string(&of(placement))
        .unwrap_or_default()
        .hash(&mut hasher);
    // Always a value: `None` would let every change through.
    Some(hasher.finish())
}
