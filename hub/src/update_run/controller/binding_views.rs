//! The planner's views of a placement's Bindings, kept between reconciles: a view is built
//! again only when its Binding changed. Every reconcile of a run plans all of its clusters, and
//! at 10,000 clusters building 10,000 views each time (their strings copied, their overrides'
//! key formatted) was a tenth of the hub's CPU during the run, while a reconcile sees a few
//! hundred Bindings changed since the last.
//!
//! A view is a function of one version of its Binding: it is reused while the Binding's
//! resourceVersion is the one it was built from (every write gives an object a new one). Only
//! the views of placements that have an unfinished run are kept.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use fleethub_crds::Binding;

use super::BindingView;

/// Views by placement, then by Binding name.
#[derive(Default)]
pub(super) struct BindingViews(Mutex<HashMap<String, HashMap<String, Arc<BindingView>>>>);

impl BindingViews {
    /// The views of `bindings` (the newest copies of `placement`'s Bindings): those kept from
    /// an earlier reconcile when their Binding has not changed, new ones otherwise. Only these
    /// are kept for the next reconcile.
    pub(super) fn of<'b>(
        &self,
        placement: &str,
        bindings: impl IntoIterator<Item = &'b Binding>,
    ) -> Vec<Arc<BindingView>> {
        // Taken out while the views are built, so that the lock is not held meanwhile (two runs
        // of one placement reconciled at once each find what the other has not taken).
        let mut earlier = self.lock().remove(placement).unwrap_or_default();
        let mut kept = HashMap::with_capacity(earlier.len());
        let mut views = Vec::with_capacity(earlier.len());
        for binding in bindings {
            let name = binding.metadata.name.as_deref().unwrap_or_default();
            let version = binding.metadata.resource_version.as_deref();
            let view = match earlier.remove_entry(name) {
                Some((name, view)) if Some(view.resource_version.as_str()) == version => {
                    (name, view)
                }
                Some((name, _)) => (name, Arc::new(BindingView::from_binding(binding))),
                None => (
                    name.to_string(),
                    Arc::new(BindingView::from_binding(binding)),
                ),
            };
            views.push(view.1.clone());
            kept.insert(view.0, view.1);
        }
        self.lock().insert(placement.to_string(), kept);
        views
    }

    /// Forgets the views of the placements `keep` says no.
    pub(super) fn retain(&self, keep: impl Fn(&str) -> bool) {
        let mut views = self.lock();
        if !views.is_empty() {
            views.retain(|placement, _| keep(placement));
        }
    }

    fn lock(
        &self,
    ) -> std::sync::MutexGuard<'_, HashMap<String, HashMap<String, Arc<BindingView>>>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fleethub_crds::binding::{BindingSpec, BindingState};

    fn binding(name: &str, version: &str, index: i64) -> Binding {
        let mut b = Binding::new(
            name,
            BindingSpec {
                placement_name: "p".into(),
                target_cluster: name.into(),
                state: BindingState::Bound,
                resource_snapshot_index: Some(index),
                ..Default::default()
            },
        );
        b.metadata.resource_version = Some(version.into());
        b
    }

    #[test]
    fn a_view_is_built_again_only_when_its_binding_changed() {
        let views = BindingViews::default();
        let (a, b) = (binding("a", "1", 0), binding("b", "2", 0));
        let first = views.of("p", [&a, &b]);
        assert_eq!(first.len(), 2);
        assert_eq!(first[0].resource_snapshot_index, Some(0));

        // b was written again (a new resourceVersion): only its view is new.
        let b2 = binding("b", "3", 1);
        let second = views.of("p", [&a, &b2]);
        assert!(Arc::ptr_eq(&first[0], &second[0]), "a's view is reused");
        assert!(!Arc::ptr_eq(&first[1], &second[1]));
        assert_eq!(second[1].resource_snapshot_index, Some(1));
        assert_eq!(second[1].resource_version, "3");

        // A Binding that is gone is dropped, and one that came back is built anew.
        let third = views.of("p", [&b2]);
        assert_eq!(third.len(), 1);
        let fourth = views.of("p", [&a, &b2]);
        assert!(!Arc::ptr_eq(&first[0], &fourth[0]), "a was forgotten");
        assert!(Arc::ptr_eq(&second[1], &fourth[1]));
    }

    #[test]
    fn views_are_kept_per_placement_until_forgotten() {
        let views = BindingViews::default();
        let a = binding("a", "1", 0);
        let in_p = views.of("p", [&a]);
        let in_q = views.of("q", [&a]);
        assert!(
            !Arc::ptr_eq(&in_p[0], &in_q[0]),
            "placements keep their own"
        );
        assert!(Arc::ptr_eq(&in_p[0], &views.of("p", [&a])[0]));
        views.retain(|placement| placement != "p");
        assert!(!Arc::ptr_eq(&in_p[0], &views.of("p", [&a])[0]));
        assert!(Arc::ptr_eq(&in_q[0], &views.of("q", [&a])[0]));
    }
}
