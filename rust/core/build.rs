//! Links Hyperscan/Vectorscan (Debian: libvectorscan-dev or libhyperscan-dev).
//!
//! Statically when `libhs.a` is found (the default on Debian, which ships it in the -dev
//! package), together with the C++ runtime it needs (`libstdc++.a`): the extension then has no
//! NEEDED entry outside what every manylinux system has (libc, libm, libgcc_s), so the wheel
//! installs where no Hyperscan is. `RANKWATCH_HS_LINK` overrides the choice:
//!
//! - `static`: require `libhs.a` (fail the build if it is missing);
//! - `dynamic`: link `libhs.so` as before (the wheel then needs a system Hyperscan, or
//!   `auditwheel repair` to bundle it);
//! - unset or `auto`: static when `libhs.a` is found, else dynamic.
//!
//! `RANKWATCH_STATIC_CXX=0` links the C++ runtime dynamically (libstdc++.so.6, allowed by
//! manylinux within its symbol-version limits) when Hyperscan is static.
//! `HS_LIB_DIR` names the folder holding the library; otherwise pkg-config's, then the usual
//! system folders.
use std::path::{Path, PathBuf};
use std::process::Command;

fn main() {
    for var in [
        "HS_LIB_DIR",
        "RANKWATCH_HS_LINK",
        "RANKWATCH_STATIC_CXX",
        "CXX",
        "PKG_CONFIG_PATH",
    ] {
        println!("cargo:rerun-if-env-changed={var}");
    }
    let (explicit, dirs) = lib_dirs();
    let mode = std::env::var("RANKWATCH_HS_LINK").unwrap_or_default();
    let archive = dirs.iter().map(|d| d.join("libhs.a")).find(|p| p.is_file());
    let link_static = match (mode.as_str(), &archive) {
        ("dynamic", _) => false,
        ("static", None) => panic!(
            "RANKWATCH_HS_LINK=static but no libhs.a in {dirs:?}: install libvectorscan-dev \
             (or libhyperscan-dev), or point HS_LIB_DIR at the folder that holds libhs.a"
        ),
        ("static" | "auto" | "", Some(_)) => true,
        ("auto" | "", None) => false,
        (other, _) => panic!("RANKWATCH_HS_LINK={other}: expected static, dynamic or auto"),
    };
    println!("cargo::rustc-check-cfg=cfg(hs_static)");
    if let Some(path) = archive.as_ref().filter(|_| link_static) {
        println!("cargo:rerun-if-changed={}", path.display());
        println!("cargo:rustc-cfg=hs_static");
        if let Some(dir) = path.parent() {
            println!("cargo:rustc-link-search=native={}", dir.display());
        }
        println!("cargo:rustc-link-lib=static=hs");
        link_cxx_runtime();
    } else {
        for dir in &explicit {
            println!("cargo:rustc-link-search=native={}", dir.display());
        }
        println!("cargo:rustc-link-lib=dylib=hs");
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

/// Hyperscan is C++: with the static libhs, link the C++ runtime too, statically unless
/// RANKWATCH_STATIC_CXX=0 or the compiler has no libstdc++.a. Its symbols stay local to the
/// extension (rustc exports only the module's init function), so they cannot clash with
/// another libstdc++ in the same process.
fn link_cxx_runtime() {
    let want_static = std::env::var("RANKWATCH_STATIC_CXX").map_or(true, |v| v != "0");
    if want_static {
        if let Some(dir) = cxx_archive_dir() {
            println!("cargo:rustc-link-search=native={}", dir.display());
            println!("cargo:rustc-link-lib=static=stdc++");
            return;
        }
        println!("cargo:warning=no libstdc++.a found: linking the C++ runtime dynamically");
    }
    println!("cargo:rustc-link-lib=dylib=stdc++");
}

/// The folder holding the C++ compiler's libstdc++.a (`c++ -print-file-name=libstdc++.a`).
fn cxx_archive_dir() -> Option<PathBuf> {
    let target = std::env::var("TARGET").unwrap_or_default();
    let cxx = std::env::var(format!("CXX_{}", target.replace('-', "_")))
        .or_else(|_| std::env::var("CXX"))
        .unwrap_or_else(|_| "c++".to_string());
    let out = Command::new(&cxx)
        .arg("-print-file-name=libstdc++.a")
        .output()
        .ok()?;
    let path = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    // An unknown file is echoed back bare ("libstdc++.a"): only an absolute path was found.
    if !(path.is_absolute() && path.is_file()) {
        return None;
    }
    path.parent().map(Path::to_path_buf)
}
