//! Reading the tables `meshrun` prints: the rows of a mesh-check or matrix table, the data rows
//! of an nccl-tests table, and the check that every row of a sweep was verified.

use crate::Run;

/// The fields of an nccl-tests data row: size, count, type, redop, root, then time, algbw,
/// busbw and #wrong out of place, and the last four again in place.
pub const NCCL_ROW: usize = 13;

/// The fields of a baseline's data row (`--baseline mpi`): out of place only.
pub const BASELINE_ROW: usize = 9;

/// Rows of a mesh-check or matrix table: lines that start with a rank number.
pub fn table_rows(text: &str) -> Vec<Vec<String>> {
    text.lines()
        .filter(|l| l.split_whitespace().next().is_some_and(|w| w.parse::<usize>().is_ok()) && !l.starts_with('#'))
        .map(|l| l.split_whitespace().map(str::to_owned).collect())
        .collect()
}

/// Data rows of an nccl-tests table: rows that start with a byte count and have one of `widths`
/// fields ([`NCCL_ROW`], [`BASELINE_ROW`]).
pub fn nccl_rows(text: &str, widths: &[usize]) -> Vec<Vec<String>> {
    table_rows(text)
        .into_iter()
        .filter(|f| widths.contains(&f.len()))
        .collect()
}

/// The run passed and every one of its `want_rows` data rows (of `widths` fields) was verified:
/// #wrong is 0 out of place and in place, and nothing was out of bounds. `what` heads the
/// failure message.
pub fn expect_verified(what: &str, r: &Run, want_rows: usize, widths: &[usize]) {
    r.expect_code(0);
    let rs = nccl_rows(&r.stdout, widths);
    assert_eq!(rs.len(), want_rows, "{what}:\n{}", r.stdout);
    for row in &rs {
        assert_eq!(row[8], "0", "{what}: out-of-place #wrong: {row:?}");
        assert_eq!(row[12], "0", "{what}: in-place #wrong: {row:?}");
    }
    assert!(r.stdout.contains("# Out of bounds values : 0 OK"), "{}", r.stdout);
}
