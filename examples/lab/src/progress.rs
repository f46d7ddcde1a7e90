//! Progress bars (indicatif), hidden when stderr is not a terminal.

use indicatif::{ProgressBar, ProgressStyle};

/// A bar of `len` steps labelled `what`.
pub fn bar(len: u64, what: &str) -> ProgressBar {
    let pb = ProgressBar::new(len);
    if let Ok(style) = ProgressStyle::with_template("{prefix:>16} [{bar:40}] {pos}/{len} {elapsed}")
    {
        pb.set_style(style.progress_chars("=> "));
    }
    pb.set_prefix(what.to_string());
    pb
}
