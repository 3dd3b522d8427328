//! Parsed flags written back as a command line, for re-running this
//! program as a child (`serve --procs` workers, `load --procs` children).

use std::ffi::OsString;
use std::fmt::Display;
use std::path::{Path, PathBuf};

/// `--name value` pairs and switches, in the order given.
#[derive(Default)]
pub struct Flags(Vec<OsString>);

impl Flags {
    pub fn value(&mut self, name: &str, value: impl Display) -> &mut Flags {
        self.0.extend([format!("--{name}").into(), value.to_string().into()]);
        self
    }

    /// Written only when set.
    pub fn optional(&mut self, name: &str, value: Option<impl Display>) -> &mut Flags {
        if let Some(value) = value {
            self.value(name, value);
        }
        self
    }

    /// A path, written as it is (not necessarily UTF-8), only when set.
    pub fn path(&mut self, name: &str, path: Option<&Path>) -> &mut Flags {
        if let Some(path) = path {
            self.0.extend([format!("--{name}").into(), path.as_os_str().to_owned()]);
        }
        self
    }

    /// The flag once per path.
    pub fn paths(&mut self, name: &str, paths: &[PathBuf]) -> &mut Flags {
        for path in paths {
            self.path(name, Some(path));
        }
        self
    }

    pub fn switch(&mut self, name: &str, on: bool) -> &mut Flags {
        if on {
            self.0.push(format!("--{name}").into());
        }
        self
    }

    pub fn into_args(self) -> Vec<OsString> {
        self.0
    }
}
