//! Secrets given as a file (a mounted Kubernetes Secret) rather than as a value on the
//! command line or in the environment, where `ps` and `/proc` show them.

use std::path::{Path, PathBuf};

/// Why a secret file gives no secret; retrying does not help until the file is fixed.
#[derive(Debug, thiserror::Error)]
pub enum SecretFileError {
    /// The file cannot be read.
    #[error("cannot read {}", path.display())]
    Read {
        /// The path given.
        path: PathBuf,
        /// What the file system said.
        #[source]
        source: std::io::Error,
    },
    /// The file holds nothing (a mounted Secret that lacks its key).
    #[error("{} is empty", path.display())]
    Empty {
        /// The path given.
        path: PathBuf,
    },
}

/// The secret in `path`: its text without the one trailing newline (`\n` or `\r\n`) that
/// `echo` and editors leave, which is not part of the secret.
pub fn read_secret_file(path: &Path) -> Result<String, SecretFileError> {
    let mut text = std::fs::read_to_string(path).map_err(|source| SecretFileError::Read {
        path: path.to_owned(),
        source,
    })?;
    if text.ends_with('\n') {
        text.pop();
        if text.ends_with('\r') {
            text.pop();
        }
    }
    if text.is_empty() {
        return Err(SecretFileError::Empty {
            path: path.to_owned(),
        });
    }
    Ok(text)
}

/// A secret given either as a value (which wins) or as a file; `None` when neither is.
pub fn value_or_file(
    value: Option<String>,
    file: Option<&Path>,
) -> Result<Option<String>, SecretFileError> {
    match (value, file) {
        (Some(value), _) => Ok(Some(value)),
        (None, Some(path)) => read_secret_file(path).map(Some),
        (None, None) => Ok(None),
    }
}

/// A secret of a program ("webhook bearer token") that cannot be read: the name says
/// which flag to fix.
#[derive(Debug, thiserror::Error)]
#[error("cannot read the {what}")]
pub struct NamedSecretError {
    what: String,
    #[source]
    source: SecretFileError,
}

/// [`value_or_file`] of the secret called `what`, its error naming it.
pub fn named(
    value: Option<String>,
    file: Option<&Path>,
    what: &str,
) -> Result<Option<String>, NamedSecretError> {
    value_or_file(value, file).map_err(|source| NamedSecretError {
        what: what.to_owned(),
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_secret_file_loses_one_trailing_newline_and_an_empty_one_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let crlf = dir.path().join("crlf");
        std::fs::write(&crlf, "s3cret\r\n").unwrap();
        assert_eq!(read_secret_file(&crlf).unwrap(), "s3cret");
        let two = dir.path().join("two");
        std::fs::write(&two, "s3cret\n\n").unwrap();
        assert_eq!(read_secret_file(&two).unwrap(), "s3cret\n");
        let empty = dir.path().join("empty");
        std::fs::write(&empty, "\n").unwrap();
        assert!(matches!(
            read_secret_file(&empty),
            Err(SecretFileError::Empty { .. })
        ));
    }

    #[test]
    fn a_value_wins_over_a_file_and_neither_gives_none() {
        let missing = Path::new("/nonexistent/secret");
        assert_eq!(
            value_or_file(Some("v".into()), Some(missing)).unwrap(),
            Some("v".into())
        );
        assert_eq!(value_or_file(None, None).unwrap(), None);
        assert!(matches!(
            value_or_file(None, Some(missing)),
            Err(SecretFileError::Read { .. })
        ));
    }
}
