//! Compile collectives/src/gpu/reduce.cu to reduce.ptx with NVRTC (run by scripts/gen-ptx).

use std::io::Write;
use std::path::Path;

fn main() {
    let ptx = match collectives::gpu::kernels::compile() {
        Ok(p) => p,
        Err(e) => {
            eprintln!("gen-ptx: {e}");
            std::process::exit(2);
        }
    };
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/gpu");
    let tmp = dir.join(".reduce.ptx.tmp");
    let dst = dir.join("reduce.ptx");
    let write = || -> std::io::Result<()> {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(ptx.as_bytes())?;
        f.sync_all()?;
        std::fs::rename(&tmp, &dst)
    };
    if let Err(e) = write() {
        eprintln!("gen-ptx: writing {}: {e}", dst.display());
        std::process::exit(2);
    }
    println!(
        "gen-ptx: wrote {} ({} bytes, NVRTC release {})",
        dst.display(),
        ptx.len(),
        collectives::gpu::kernels::ptx_release(&ptx).unwrap_or("?")
    );
}
