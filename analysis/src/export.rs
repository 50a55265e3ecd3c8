//! One output format of a run, for every kind of run: the whole run rendered as the bytes of
//! stdout or of an output file. The pairwise formats are in `pairwise::report`, the collective
//! ones in `coll::report`.

/// Why a report could not be rendered: only an image encoder can fail.
#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    #[error(transparent)]
    Png(#[from] png::EncodingError),
}

/// One output format (each in its own file) of a run `R`: a `PairwiseOutcome`, or a `CollRun`.
pub trait Exporter<R: ?Sized> {
    fn render(&self, run: &R) -> Result<Vec<u8>, ExportError>;
}
