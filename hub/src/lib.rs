//! The fleethub hub controller manager's controllers.
#![forbid(unsafe_code)]

pub mod clock;
pub mod update_run;
