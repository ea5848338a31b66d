//! The fleet's OCI registry and simulated unready images, from a test's side.
//!
//! `deploy/local/fleet up` runs a real registry (`FLEET_REGISTRY` in `fleet.env`, plain HTTP);
//! `push-tag` pushes a tiny image under tags, `delete-repo` deletes a repository's manifests,
//! and `simulate-unready` makes pods running an image stay unready (kwok stages). See
//! deploy/local/README.md.

use std::sync::Mutex;

use crate::{Error, Fleet, unique_name};

/// `simulate-unready` rewrites one list and restarts kwok: one call at a time in this process
/// (the script also locks, for other processes).
static UNREADY: Mutex<()> = Mutex::new(());

impl Fleet {
    /// The registry's address, `127.0.0.1:PORT` (an image is `{registry}/{repository}:{tag}`).
    pub fn registry(&self) -> Result<String, Error> {
        self.env_setting("FLEET_REGISTRY")
    }

    /// Pushes the fleet's test image to `repository` under each of `tags`.
    pub fn push_tags(&self, repository: &str, tags: &[&str]) -> Result<(), Error> {
        let mut args = vec!["push-tag", repository];
        args.extend_from_slice(tags);
        self.script(&args)
    }

    /// Deletes every manifest (and so every tag) of `repository`.
    pub fn delete_repository(&self, repository: &str) -> Result<(), Error> {
        self.script(&["delete-repo", repository])
    }

    /// A repository named `prefix-<random>` that the test owns: its tags are deleted when the
    /// guard is dropped, also when the test fails.
    pub fn registry_repo(&self, prefix: &str) -> Result<RegistryRepo<'_>, Error> {
        Ok(RegistryRepo {
            fleet: self,
            registry: self.registry()?,
            name: unique_name(prefix),
        })
    }

    /// Stops the registry (a registry outage); [`Fleet::start_registry`] starts it again.
    pub fn kill_registry(&self) -> Result<(), Error> {
        self.kill("registry")
    }

    /// Starts the registry if it is not running, and waits until it answers.
    pub fn start_registry(&self) -> Result<(), Error> {
        self.script(&["start-registry"])
    }

    /// Makes every pod running exactly `image` on every member stay unready (Running, not
    /// Ready; a Ready one turns unready) until the guard is dropped.
    pub fn simulate_unready(&self, image: &str) -> Result<Unready<'_>, Error> {
        let _one = UNREADY.lock().unwrap_or_else(|e| e.into_inner());
        self.script(&["simulate-unready", image])?;
        Ok(Unready {
            fleet: self,
            image: image.to_string(),
        })
    }
}

/// A registry repository a test owns (see [`Fleet::registry_repo`]).
#[derive(Debug)]
pub struct RegistryRepo<'a> {
    fleet: &'a Fleet,
    registry: String,
    name: String,
}

impl RegistryRepo<'_> {
    /// The repository's name in the registry, e.g. `web-1a2b3c4d`.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The repository with the registry's address, e.g. `127.0.0.1:17300/web-1a2b3c4d`.
    pub fn reference(&self) -> String {
        format!("{}/{}", self.registry, self.name)
    }

    /// The image `reference():tag`.
    pub fn image(&self, tag: &str) -> String {
        format!("{}:{tag}", self.reference())
    }

    /// Pushes the test image under each of `tags`.
    pub fn push(&self, tags: &[&str]) -> Result<(), Error> {
        self.fleet.push_tags(&self.name, tags)
    }
}

impl Drop for RegistryRepo<'_> {
    fn drop(&mut self) {
        // A registry a test stopped and did not restart cannot be cleaned: say so, do not panic
        // during a panic.
        if let Err(e) = self.fleet.delete_repository(&self.name) {
            eprintln!(
                "fleethub-testkit: could not delete registry repository {}: {e}",
                self.name
            );
        }
    }
}

/// An image that pods stay unready with until this guard is dropped (see
/// [`Fleet::simulate_unready`]).
#[derive(Debug)]
pub struct Unready<'a> {
    fleet: &'a Fleet,
    image: String,
}

impl Unready<'_> {
    /// The image.
    pub fn image(&self) -> &str {
        &self.image
    }
}

impl Drop for Unready<'_> {
    fn drop(&mut self) {
        let _one = UNREADY.lock().unwrap_or_else(|e| e.into_inner());
        if let Err(e) = self
            .fleet
            .script(&["simulate-unready", "--clear", &self.image])
        {
            eprintln!(
                "fleethub-testkit: could not clear unready image {}: {e}",
                self.image
            );
        }
    }
}
