//! Auto-update: a workload follows its registry. This module holds the parts that stand on
//! their own: listing a repository's tags ([`registry`]) with [`credentials`] read from a
//! Secret, reading image references ([`image`]), choosing the version to move to
//! ([`versions`]) and the check schedule ([`schedule`]).

pub mod credentials;
pub mod image;
pub mod registry;
pub mod schedule;
pub mod versions;
