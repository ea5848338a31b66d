//! One module per page, each drawn in the shared [`skeleton::Page`].

pub mod approvals;
pub mod auto_updates;
pub mod confirm_approval;
pub mod fleet;
pub mod placements;
pub mod run;
pub mod runs;
pub mod skeleton;
