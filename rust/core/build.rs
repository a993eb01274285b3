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
//!
//! Cross-compiling (cargo's `TARGET` differs from `HOST`, e.g. `aarch64-unknown-linux-gnu` on
//! x86-64), only the target's folders are searched: its Debian multiarch folder
//! (`/usr/lib/aarch64-linux-gnu`, where `libvectorscan-dev:arm64` puts `libhs.a`) and the cross
//! compiler's (`/usr/aarch64-linux-gnu/lib`); the host's pkg-config is asked only with
//! `PKG_CONFIG_ALLOW_CROSS=1` (pointed at the target's `.pc` files), and `libstdc++.a` comes
//! from the target's C++ compiler (`CXX_<target>`, `TARGET_CXX`, else
//! `aarch64-linux-gnu-g++`), never from the host's.
use std::path::{Path, PathBuf};
use std::process::Command;

fn main() {
    for var in [
        "HS_LIB_DIR",
        "RANKWATCH_HS_LINK",
        "CXX",
        "TARGET_CXX",
        "PKG_CONFIG_PATH",
        "PKG_CONFIG_ALLOW_CROSS",
        "PKG_CONFIG_LIBDIR",
    ] {
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

/// Whether cargo builds for another machine than the one it runs on.
fn cross() -> bool {
    std::env::var("TARGET").ok() != std::env::var("HOST").ok()
}

/// The GNU triple of the target as Debian names its cross tools and multiarch folders
/// (`aarch64-unknown-linux-gnu` → `aarch64-linux-gnu`): the Rust triple without its vendor.
fn gnu_triple() -> String {
    let arch = std::env::var("CARGO_CFG_TARGET_ARCH").unwrap_or_default();
    let env = std::env::var("CARGO_CFG_TARGET_ENV").unwrap_or_default();
    let env = if env.is_empty() {
        "gnu".to_string()
    } else {
        env
    };
    format!("{arch}-linux-{env}")
}

/// (folders the dynamic link must be told about, folders to look for libhs.a in): HS_LIB_DIR;
/// else pkg-config's -L flags (none for a library in the linker's default folders) and its
/// libdir; else the usual system folders. Cross-compiling, the host's folders are left out
/// (they hold the host's libhs.a) and pkg-config is asked only when allowed.
fn lib_dirs() -> (Vec<PathBuf>, Vec<PathBuf>) {
    if let Ok(dir) = std::env::var("HS_LIB_DIR") {
        return (vec![PathBuf::from(&dir)], vec![PathBuf::from(dir)]);
    }
    let cross = cross();
    let triple = gnu_triple();
    let multiarch = format!("/usr/lib/{triple}");
    let mut explicit = Vec::new();
    let mut dirs = Vec::new();
    let ask_pkg_config = !cross || std::env::var("PKG_CONFIG_ALLOW_CROSS").as_deref() == Ok("1");
    if ask_pkg_config {
        let pkg_config = |arg: &str| {
            let mut cmd = Command::new("pkg-config");
            cmd.args([arg, "libhs"]);
            if cross && std::env::var_os("PKG_CONFIG_LIBDIR").is_none() {
                cmd.env("PKG_CONFIG_LIBDIR", format!("{multiarch}/pkgconfig"));
            }
            cmd.output().ok()
        };
        if let Some(out) = pkg_config("--libs-only-L") {
            for flag in String::from_utf8_lossy(&out.stdout).split_whitespace() {
                if let Some(dir) = flag.strip_prefix("-L") {
                    explicit.push(PathBuf::from(dir));
                }
            }
            dirs.clone_from(&explicit);
            if let Some(out) = pkg_config("--variable=libdir") {
                let dir = String::from_utf8_lossy(&out.stdout).trim().to_string();
                if !dir.is_empty() {
                    dirs.push(PathBuf::from(dir));
                }
            }
        }
    }
    if cross {
        // Debian's multiarch folder (libvectorscan-dev:arm64), then the cross toolchain's.
        dirs.extend([multiarch, format!("/usr/{triple}/lib")].map(PathBuf::from));
        // The linker must be told: a cross linker's default folders are its own sysroot's.
        explicit = dirs.iter().filter(|d| d.is_dir()).cloned().collect();
    } else {
        dirs.extend(
            [
                multiarch.as_str(),
                "/usr/lib64",
                "/usr/lib",
                "/usr/local/lib",
            ]
            .map(PathBuf::from),
        );
    }
    (explicit, dirs)
}

/// The folder holding libstdc++.a, as the C++ compiler (or, without one, the C compiler, which
/// searches the same folders) reports it: `c++ -print-file-name=libstdc++.a`.
fn cxx_archive_dir() -> Option<PathBuf> {
    let target = std::env::var("TARGET")
        .unwrap_or_default()
        .replace('-', "_");
    println!("cargo:rerun-if-env-changed=CXX_{target}");
    let mut compilers: Vec<String> = [format!("CXX_{target}"), "TARGET_CXX".to_string()]
        .iter()
        .filter_map(|var| std::env::var(var).ok())
        .collect();
    if cross() {
        // The host's c++ would answer with the host's libstdc++.a.
        let triple = gnu_triple();
        compilers.extend([format!("{triple}-g++"), format!("{triple}-gcc")]);
    } else {
        compilers.extend(std::env::var("CXX"));
        compilers.extend(["c++", "g++", "cc"].map(String::from));
    }
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
