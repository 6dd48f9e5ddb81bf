//! Hints about shared (managed) memory: where to migrate it ahead of use ([`Location`], for
//! [`crate::Queue::prefetch`]) and how it will be used ([`Advice`], for [`crate::Queue::advise`]),
//! as CUDA's `cuMemPrefetchAsync`/`cuMemAdvise` and SYCL's `prefetch`/`mem_advise` take them.

use std::fmt;
use std::str::FromStr;

use crate::Error;

/// Where shared memory should live: the queue's device, or the host.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Location {
    /// The device of the queue that is asked.
    Device,
    /// The host CPU.
    Host,
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Location::Device => "device",
            Location::Host => "host",
        })
    }
}

impl FromStr for Location {
    type Err = Error;

    fn from_str(text: &str) -> Result<Self, Error> {
        match text {
            "device" => Ok(Location::Device),
            "host" => Ok(Location::Host),
            other => Err(Error::invalid(
                "location",
                format!("{other:?} is not \"device\" or \"host\""),
            )),
        }
    }
}

/// How shared memory will be used: CUDA's `CUmem_advise` values, and the backend's own advice
/// number for SYCL's `mem_advise`, whose meaning each SYCL backend defines.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Advice {
    /// Mostly read: devices may keep read-only copies.
    SetReadMostly,
    /// Undoes [`Advice::SetReadMostly`].
    UnsetReadMostly,
    /// Keep the pages at this location where possible.
    SetPreferredLocation(Location),
    /// Undoes [`Advice::SetPreferredLocation`].
    UnsetPreferredLocation,
    /// The location will access the memory: keep it mapped there.
    SetAccessedBy(Location),
    /// Undoes [`Advice::SetAccessedBy`].
    UnsetAccessedBy(Location),
    /// A number the backend's runtime defines (SYCL's `mem_advise(ptr, len, advice)`).
    Native(i32),
}

impl Advice {
    /// The advice named `name` (CUDA's names without `CU_MEM_ADVISE_`, in lower case:
    /// `set_read_mostly`, `unset_read_mostly`, `set_preferred_location`,
    /// `unset_preferred_location`, `set_accessed_by`, `unset_accessed_by`), about `location`
    /// where the advice names one.
    pub fn named(name: &str, location: Option<Location>) -> Result<Advice, Error> {
        let needs = |location: Option<Location>| {
            location.ok_or_else(|| {
                Error::invalid(
                    "location",
                    format!("{name} names a location: \"device\" or \"host\""),
                )
            })
        };
        Ok(match name {
            "set_read_mostly" => Advice::SetReadMostly,
            "unset_read_mostly" => Advice::UnsetReadMostly,
            "set_preferred_location" => Advice::SetPreferredLocation(needs(location)?),
            "unset_preferred_location" => Advice::UnsetPreferredLocation,
            "set_accessed_by" => Advice::SetAccessedBy(needs(location)?),
            "unset_accessed_by" => Advice::UnsetAccessedBy(needs(location)?),
            other => {
                return Err(Error::invalid(
                    "advice",
                    format!(
                        "{other:?} is not set_read_mostly, unset_read_mostly, \
                         set_preferred_location, unset_preferred_location, set_accessed_by, \
                         unset_accessed_by or a backend's advice number"
                    ),
                ));
            }
        })
    }
}
