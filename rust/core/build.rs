//! Links the system Hyperscan/Vectorscan library (Debian: libvectorscan-dev or libhyperscan-dev).
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-env-changed=HS_LIB_DIR");
    if let Ok(dir) = std::env::var("HS_LIB_DIR") {
        println!("cargo:rustc-link-search=native={dir}");
    } else if let Ok(out) = Command::new("pkg-config")
        .args(["--libs-only-L", "libhs"])
        .output()
    {
        for flag in String::from_utf8_lossy(&out.stdout).split_whitespace() {
            if let Some(dir) = flag.strip_prefix("-L") {
                println!("cargo:rustc-link-search=native={dir}");
            }
        }
    }
    println!("cargo:rustc-link-lib=dylib=hs");
}
