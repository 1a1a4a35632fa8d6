//! Writes the docs book's reference pages (flags, metrics, Avro schemas) from the code.
//!
//! ```text
//! cargo build --workspace --bins
//! target/debug/book-reference --out book/src/reference    # what scripts/book generate runs
//! ```
//!
//! The programs' flags come from the binaries built next to this one (`generate flags`).

use std::path::PathBuf;

use anyhow::Context as _;
use clap::Parser;

/// Writes book/src/reference/*.md from the programs, their registries and schemas/avro.
#[derive(Debug, Parser)]
#[command(name = "book-reference")]
struct Cli {
    /// The directory the pages are written to.
    #[arg(long, default_value = "book/src/reference")]
    out: PathBuf,
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let repo = ipaudit_tests::manifests::repo("");
    std::fs::create_dir_all(&cli.out).with_context(|| format!("creating {}", cli.out.display()))?;
    for (name, page) in ipaudit_tests::book::reference_pages(&repo) {
        let path = cli.out.join(&name);
        std::fs::write(&path, page).with_context(|| format!("writing {}", path.display()))?;
        println!("wrote {}", path.display());
    }
    Ok(())
}
