//! The native builds of the kernels, loaded with `dlopen`: the built-in kernels' shared
//! objects, which `build.rs` compiled and the binary embeds, and a user's `--kernels`
//! library.
//!
//! Why a shared object and not a static library linked into `csx`: linked in, a kernel's
//! code lands wherever the linker puts it among the Rust code, so its alignment (and
//! which code shares its cache sets and predictor entries) changed with every Rust
//! change, and with it native's time (the same C objects ran grep in 33.9 us in one
//! build and 46.4 us in another). A shared object's code sits at fixed offsets from a
//! page-aligned base, set by the C source and clang alone.
//!
//! An embedded library is written to a temporary file, opened, and the file removed (the
//! mapping stays); the handle is never closed, so the code outlives every call. Failing
//! to write or open it (a temporary directory that is full, or mounted `noexec`) is an
//! error naming the kernel and the cause, never a crash and never a silent fallback to
//! other code.

use std::ffi::{CStr, CString};
use std::io::Write as _;
use std::path::Path;

use anyhow::{bail, Context as _};

/// A `dlopen` handle, never closed: the kernels' code must outlive every call.
#[derive(Clone, Copy)]
pub(super) struct Library(*mut libc::c_void);

impl Library {
    /// Opens the shared object at `path` (`RTLD_NOW | RTLD_LOCAL`).
    pub(super) fn open(path: &Path) -> anyhow::Result<Library> {
        let c_path = CString::new(path.as_os_str().as_encoded_bytes())
            .context("the library's path contains a NUL byte")?;
        // SAFETY: `c_path` is a valid NUL-terminated string. The library is our own
        // clang build of a kernel source (the built-in kernels' or the user's file):
        // the kernels define no constructors, and the user asked for their code to run.
        let handle = unsafe { libc::dlopen(c_path.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
        if handle.is_null() {
            bail!("dlopen {}: {}", path.display(), dl_error());
        }
        Ok(Library(handle))
    }

    /// Writes `image` (a shared object's bytes) to a temporary file and opens it.
    pub(super) fn from_image(image: &[u8]) -> anyhow::Result<Library> {
        let mut file = tempfile::Builder::new()
            .prefix("csx-bench-native-")
            .suffix(".so")
            .tempfile()
            .context("creating a temporary file for the native kernel")?;
        file.write_all(image)
            .and_then(|()| file.flush())
            .with_context(|| format!("writing {}", file.path().display()))?;
        Library::open(file.path()).context(
            "opening the native kernel (is the temporary directory mounted noexec? \
             set TMPDIR to another)",
        )
        // `file` is removed here; the open mapping keeps its pages.
    }

    /// The address of the global function `name`.
    pub(super) fn function(self, name: &str) -> anyhow::Result<*mut libc::c_void> {
        let c_name = CString::new(name).context("the symbol name contains a NUL byte")?;
        // SAFETY: `self.0` is a live handle from `dlopen` (never closed) and `c_name` a
        // valid NUL-terminated string.
        let address = unsafe { libc::dlsym(self.0, c_name.as_ptr()) };
        if address.is_null() {
            bail!("dlsym {name}: {}", dl_error());
        }
        Ok(address)
    }
}

/// The entry point `csx_bench_NAME` of a built-in kernel, from its embedded shared object.
pub(super) fn bundled(
    image: &[u8],
    symbol: &str,
) -> anyhow::Result<unsafe extern "C" fn(*const u8) -> u64> {
    let address = Library::from_image(image)?.function(symbol)?;
    // SAFETY: `address` is the code of `symbol`, which `sdk/bench` defines through
    // `bench.h`'s entry macro as `u64 csx_bench_NAME(const struct csx_bench_input *)`,
    // compiled by `build.rs` into this very image.
    Ok(unsafe {
        std::mem::transmute::<*mut libc::c_void, unsafe extern "C" fn(*const u8) -> u64>(address)
    })
}

/// The entry point of a user's kernel `name` in `lib`.
pub(super) fn user_function(
    lib: Library,
    name: &str,
) -> anyhow::Result<unsafe extern "C" fn(*const u8, u64) -> u64> {
    let address = lib.function(name)?;
    // SAFETY: `address` is the code of the global function `name`, which the user
    // declares as `u64 NAME(void *mem, u64 len)` (the documented form of --kernels);
    // the eBPF build of the same function was verified, so it is a function.
    Ok(unsafe {
        std::mem::transmute::<*mut libc::c_void, unsafe extern "C" fn(*const u8, u64) -> u64>(
            address,
        )
    })
}

/// The path of the shared object that holds `address`, or `None` when it is in none.
#[cfg(test)]
pub(super) fn object_of(address: *const libc::c_void) -> Option<std::path::PathBuf> {
    let mut info = libc::Dl_info {
        dli_fname: std::ptr::null(),
        dli_fbase: std::ptr::null_mut(),
        dli_sname: std::ptr::null(),
        dli_saddr: std::ptr::null_mut(),
    };
    // SAFETY: `info` is a valid, writable `Dl_info`; `dladdr` only reads `address`'s
    // value, never what it points at.
    let found = unsafe { libc::dladdr(address, &mut info) };
    if found == 0 || info.dli_fname.is_null() {
        return None;
    }
    // SAFETY: `dli_fname` is a NUL-terminated path owned by the loader, valid while the
    // object stays loaded (ours never unload); it is copied at once.
    let name = unsafe { CStr::from_ptr(info.dli_fname) };
    Some(std::path::PathBuf::from(
        name.to_string_lossy().into_owned(),
    ))
}

/// The last `dlerror` message.
fn dl_error() -> String {
    // SAFETY: `dlerror` returns NULL or a valid C string that stays valid until the
    // next dl* call on this thread; it is copied at once.
    unsafe {
        let e = libc::dlerror();
        if e.is_null() {
            "unknown error".to_string()
        } else {
            CStr::from_ptr(e).to_string_lossy().into_owned()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A built-in kernel's native code runs from its own shared object, not from the
    /// binary that embeds it: that is what keeps its layout out of the Rust build.
    #[test]
    fn builtin_kernels_run_from_their_own_shared_object() {
        let exe = std::env::current_exe().expect("the test binary's path");
        for kernel in super::super::KERNELS {
            let super::super::Native::Bundled(image) = kernel.native else {
                panic!("kernel {} is not bundled", kernel.name);
            };
            let f = bundled(image, kernel.symbol).expect("the embedded library opens");
            let object = object_of(f as *const libc::c_void).expect("the code is in an object");
            assert_ne!(object, exe, "kernel {}", kernel.name);
            let file = object.file_name().expect("a file name").to_string_lossy();
            assert!(
                file.starts_with("csx-bench-native-"),
                "kernel {}: {file}",
                kernel.name
            );
        }
    }

    /// An image that is not a shared object is an error naming the cause, not a crash.
    #[test]
    fn a_bad_image_is_an_error() {
        let err = format!(
            "{:#}",
            bundled(b"not an ELF file", "csx_bench_fnv").expect_err("fails")
        );
        assert!(err.contains("dlopen"), "{err}");
        assert!(err.contains("opening the native kernel"), "{err}");
    }
}
