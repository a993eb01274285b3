//! Links Hyperscan/Vectorscan (Debian: libvectorscan-dev or libhyperscan-dev).
//!
//! Statically when `libhs.a` is found (Debian ships it in the -dev package), together with
//! the C++ runtime it needs (`libstdc++.a`, which g++ brings): the extension then needs nothing
//! beyond what every manylinux system has (libc, libm, libgcc_s), so the wheel installs where
//! no Hyperscan is. `RANKWATCH_HS_LINK` overrides the choice:
//!
//! - `static`: fail the build if `libhs.a` or `libstdc++.a` is missing;
//! - `dynamic`: link `libhs.so` (the wheel then needs a system Hyperscan, or `auditwheel
//!   repair` to bundle it);
//! - unset or `auto`: static when both archives are found, else dynamic.
//!
//! The C++ runtime cannot be linked dynamically beside a static libhs: Debian's `libhs.a` is
//! compiled as position-independent executable code (-fPIE, not -fPIC), whose direct
//! references to libstdc++'s vtables and typeinfo only link when those are in the same object.
//! `HS_LIB_DIR` names the folder holding the library; otherwise pkg-config's, then the usual
//! system folders.
use std::path::{Path, PathBuf};
use std::process::Command;

fn main() {
    for var in ["HS_LIB_DIR", "RANKWATCH_HS_LINK", "CXX", "PKG_CONFIG_PATH"] {
        println!("cargo:rerun-if-env-changed={var}");
    }
    let (explicit, dirs) = lib_dirs();
    let mode = std::env::var("RANKWATCH_HS_LINK").unwrap_or_default();
    let archive = dirs.iter().map(|d| d.join("libhs.a")).find(|p| p.is_file());
    let cxx = cxx_archive_dir();
    let link_static = match (mode.as_str(), &archive, &cxx) {
        ("dynamic", _, _) => false,
        ("static", None, _) => panic!(
            "RANKWATCH_HS_LINK=static but no libhs.a in {dirs:?}: install libvectorscan-dev \
             (or libhyperscan-dev), or point HS_LIB_DIR at the folder that holds libhs.a"
        ),
        ("static", _, None) => panic!(
            "RANKWATCH_HS_LINK=static but no compiler knows a libstdc++.a: install g++ \
             (Debian: libstdc++-12-dev)"
        ),
        ("static" | "auto" | "", Some(_), Some(_)) => true,
        ("auto" | "", Some(_), None) => {
            println!(
                "cargo:warning=libhs.a found but no libstdc++.a (install g++): linking libhs.so"
            );
            false
        }
        ("auto" | "", None, _) => false,
        (other, _, _) => panic!("RANKWATCH_HS_LINK={other}: expected static, dynamic or auto"),
    };
    println!("cargo::rustc-check-cfg=cfg(hs_static)");
    match (archive, cxx) {
        (Some(path), Some(cxx_dir)) if link_static => {
            println!("cargo:rerun-if-changed={}", path.display());
            println!("cargo:rustc-cfg=hs_static");
            if let Some(dir) = path.parent() {
                println!("cargo:rustc-link-search=native={}", dir.display());
            }
            println!("cargo:rustc-link-lib=static=hs");
            // Its symbols stay local to the extension (rustc exports only the module's init
            // function), so they cannot clash with another libstdc++ in the same process.
            println!("cargo:rustc-link-search=native={}", cxx_dir.display());
            println!("cargo:rustc-link-lib=static=stdc++");
        }
        _ => {
            for dir in &explicit {
                println!("cargo:rustc-link-search=native={}", dir.display());
            }
            println!("cargo:rustc-link-lib=dylib=hs");
        }
    }
}

/// (folders the dynamic link must be told about, folders to look for libhs.a in): HS_LIB_DIR;
/// else pkg-config's -L flags (none for a library in the linker's default folders) and its
/// libdir; else the usual system folders.
fn lib_dirs() -> (Vec<PathBuf>, Vec<PathBuf>) {
    if let Ok(dir) = std::env::var("HS_LIB_DIR") {
        return (vec![PathBuf::from(&dir)], vec![PathBuf::from(dir)]);
    }
    let mut explicit = Vec::new();
    let mut dirs = Vec::new();
    if let Ok(out) = Command::new("pkg-config")
        .args(["--libs-only-L", "libhs"])
        .output()
    {
        for flag in String::from_utf8_lossy(&out.stdout).split_whitespace() {
            if let Some(dir) = flag.strip_prefix("-L") {
                explicit.push(PathBuf::from(dir));
            }
        }
        dirs.clone_from(&explicit);
        if let Ok(out) = Command::new("pkg-config")
            .args(["--variable=libdir", "libhs"])
            .output()
        {
            let dir = String::from_utf8_lossy(&out.stdout).trim().to_string();
            if !dir.is_empty() {
                dirs.push(PathBuf::from(dir));
            }
        }
    }
    let arch = std::env::var("CARGO_CFG_TARGET_ARCH").unwrap_or_default();
    let multiarch = format!("/usr/lib/{arch}-linux-gnu");
    dirs.extend(
        [
            multiarch.as_str(),
            "/usr/lib64",
            "/usr/lib",
            "/usr/local/lib",
        ]
        .map(PathBuf::from),
    );
    (explicit, dirs)
}

/// The folder holding libstdc++.a, as the C++ compiler (or, without one, the C compiler, which
/// searches the same folders) reports it: `c++ -print-file-name=libstdc++.a`.
fn cxx_archive_dir() -> Option<PathBuf> {
    let target = std::env::var("TARGET")
        .unwrap_or_default()
        .replace('-', "_");
    println!("cargo:rerun-if-env-changed=CXX_{target}");
    let mut compilers: Vec<String> = [format!("CXX_{target}"), "CXX".to_string()]
        .iter()
        .filter_map(|var| std::env::var(var).ok())
        .collect();
    compilers.extend(["c++", "g++", "cc"].map(String::from));
    compilers.iter().find_map(|cxx| {
        let out = Command::new(cxx)
            .arg("-print-file-name=libstdc++.a")
            .output()
            .ok()?;
        let path = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
        // An unknown file is echoed back bare ("libstdc++.a"): only an absolute path was found.
        if !(path.is_absolute() && path.is_file()) {
            return None;
        }
        path.parent().map(Path::to_path_buf)
    })
}
