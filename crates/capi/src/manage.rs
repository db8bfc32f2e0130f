//! Discovery, CSEs, CSFs (download, activation, lookup) and device management: the rest
//! of `cs_api.h`'s functions, and the spec's functions csx does not provide (each
//! returns `CS_UNSUPPORTED` after checking its handle, with a message saying why).

use std::ffi::{c_char, c_int, c_uint, c_void};
use std::sync::Arc;

use csx_host::proto::limits::{PROGRAM_SIZE_MAX, WINDOWS_MAX};
use csx_host::proto::{EngineKind, ProgramIndex, ProgramState, ProgramType};

use crate::api::{
    close_handle, csf_slot, device, fail, handle_state, inp, open_shared, out, run, string, Fail,
    CSX_BUILTIN_CSF_BASE, R,
};
use crate::registry::{self, handle_of, key_of, Dev, Handle};
use crate::status::*;
use crate::types::*;

/// Writes `text` and its NUL into `buf` of `*len` bytes; `*len` becomes the size needed.
///
/// # Safety
/// `buf` is null or writable for `*len` bytes.
pub(crate) unsafe fn write_string(text: &str, len: &mut c_int, buf: *mut c_char) -> R<CsStatus> {
    let need = text.len() + 1;
    let need_c = c_int::try_from(need).or_else(|_| fail(CS_FATAL_ERROR, "name list too long"))?;
    let have = *len;
    *len = need_c;
    if buf.is_null() {
        return Ok(CS_SUCCESS);
    }
    if have < need_c {
        return fail(
            CS_INVALID_LENGTH,
            format!("the buffer holds {have} bytes, {need} are needed (set in *Length)"),
        );
    }
    // SAFETY: `buf` holds `have >= need` bytes by the caller's contract.
    let dst = unsafe { std::slice::from_raw_parts_mut(buf.cast::<u8>(), need) };
    dst[..text.len()].copy_from_slice(text.as_bytes());
    dst[text.len()] = 0;
    Ok(CS_SUCCESS)
}

/// `write_string` with an `int *Length`.
///
/// # Safety
/// `len` is null or writable; `buf` null or writable for `*len` bytes.
unsafe fn write_string_int(text: &str, len: *mut c_int, buf: *mut c_char) -> R<CsStatus> {
    // SAFETY: the caller's contract.
    let len = unsafe { out(len, "Length") }?;
    // SAFETY: forwarded.
    unsafe { write_string(text, len, buf) }
}

/// `write_string` with an `unsigned int *Length`.
///
/// # Safety
/// As `write_string_int`.
unsafe fn write_string_uint(text: &str, len: *mut c_uint, buf: *mut c_char) -> R<CsStatus> {
    // SAFETY: the caller's contract.
    let len = unsafe { out(len, "Length") }?;
    let mut l = c_int::try_from(*len).unwrap_or(c_int::MAX);
    // SAFETY: forwarded.
    let r = unsafe { write_string(text, &mut l, buf) };
    *len = l as c_uint;
    r
}

fn copy_name<const N: usize>(dst: &mut [u8; N], src: &str) {
    let n = src.len().min(N - 1);
    dst[..n].copy_from_slice(&src.as_bytes()[..n]);
    dst[n..].fill(0);
}

// -------------------------------------------------------------------------------------
// Discovery.

/// Device names from `CSX_DEVICES` (comma-separated) and the devices open in this process.
fn known_devices() -> Vec<String> {
    let mut names: Vec<String> = std::env::var("CSX_DEVICES")
        .unwrap_or_default()
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .collect();
    let open: Vec<String> =
        registry::with(|r| r.devices.values().map(|d| d.name.clone()).collect());
    for n in open {
        if !names.contains(&n) {
            names.push(n);
        }
    }
    names
}

/// Runs `f` on the device `name` (shared with this process's handles; opened for the
/// call when none is open).
fn with_device<T>(name: &str, f: impl FnOnce(&Arc<Dev>) -> R<T>) -> R<T> {
    let key = open_shared(name)?;
    let dev = device(handle_of(key))?;
    let result = f(&dev);
    drop(dev);
    close_handle(handle_of(key))?;
    result
}

/// The device's fixed-id table (see [`crate::fixed`]), as a status on failure.
pub(crate) fn fixed_ids(dev: &Dev) -> R<Vec<(u32, String)>> {
    crate::fixed::read(&dev.device).map_err(|e| match e {
        crate::fixed::FixedIdError::Device(e) => Fail::from(e),
        other => Fail {
            status: CS_DEVICE_ERROR,
            message: format!("{}: {other}", dev.name),
        },
    })
}

/// The names of a device's CSFs: downloadable ones (occupied slots; their fixed id when
/// their name has one) then built-in ones.
fn csf_names(dev: &Dev) -> R<Vec<(String, u32, bool, bool)>> {
    let mut list = Vec::new();
    let fixed = fixed_ids(dev)?;
    for p in dev.device.programs()? {
        let name = p.persistent.unwrap_or(p.name);
        let id = crate::fixed::id_of(&fixed, &name).unwrap_or(u32::from(p.pind.0));
        list.push((name, id, true, p.state == ProgramState::Active));
    }
    for f in dev.device.functions()? {
        list.push((f.name, CSX_BUILTIN_CSF_BASE + f.id.0, false, true));
    }
    Ok(list)
}

/// Lists the devices this process knows: those named in `CSX_DEVICES` and those open,
/// comma-separated. With `Buf` NULL, `*Length` receives the size needed.
///
/// # Safety
/// `Length` is null or writable; `Buf` is null or writable for `*Length` bytes.
#[no_mangle]
pub unsafe extern "C" fn csQueryCSxList(Length: *mut c_int, Buf: *mut c_char) -> CsStatus {
    run("csQueryCSxList", || {
        let list = known_devices().join(",");
        // SAFETY: forwarded contract.
        unsafe { write_string_int(&list, Length, Buf) }
    })
}

/// The CSEs (on csx: one per device, named as the device) that hold a CSF named
/// `FunctionName` (NULL or empty: every CSE), comma-separated, among the devices of
/// `csQueryCSxList`.
///
/// # Safety
/// `FunctionName` is null or a string; `Length` null or writable; `Buffer` null or
/// writable for `*Length` bytes.
#[no_mangle]
pub unsafe extern "C" fn csQueryCSEList(
    FunctionName: *const c_char,
    Length: *mut c_int,
    Buffer: *mut c_char,
) -> CsStatus {
    run("csQueryCSEList", || {
        let want = if FunctionName.is_null() {
            None
        } else {
            // SAFETY: the caller's contract.
            Some(unsafe { string(FunctionName, "FunctionName") }?.to_string())
        };
        let mut cses = Vec::new();
        for name in known_devices() {
            let has = match want.as_deref() {
                None | Some("") => true,
                Some(f) => with_device(&name, |d| Ok(csf_names(d)?.iter().any(|c| c.0 == f)))
                    .unwrap_or(false),
            };
            if has {
                cses.push(name);
            }
        }
        // SAFETY: forwarded contract.
        unsafe { write_string_int(&cses.join(","), Length, Buffer) }
    })
}

/// The CSE of a CSx: on csx, the device itself (its name).
///
/// # Safety
/// `Length` null or writable; `CSEName` null or writable for `*Length` bytes.
#[no_mangle]
pub unsafe extern "C" fn csGetCSEFromCSx(
    DevHandle: CsDevHandle,
    Length: *mut c_uint,
    CSEName: *mut c_char,
) -> CsStatus {
    run("csGetCSEFromCSx", || {
        let dev = device(DevHandle)?;
        // SAFETY: forwarded contract.
        unsafe { write_string_uint(&dev.name, Length, CSEName) }
    })
}

/// Opens a CSE by name: on csx a CSE is its device, so this is `csOpenCSx` (sharing the
/// device this process has open).
///
/// # Safety
/// As `csOpenCSx`.
#[no_mangle]
pub unsafe extern "C" fn csOpenCSE(
    CSEName: *const c_char,
    CSEContext: *mut c_void,
    CSEHandle: *mut CsDevHandle,
) -> CsStatus {
    // SAFETY: forwarded contract.
    unsafe { crate::api::csOpenCSx(CSEName, CSEContext, CSEHandle) }
}

/// Closes a CSE handle (`csCloseCSx`).
#[no_mangle]
pub extern "C" fn csCloseCSE(CSEHandle: CsDevHandle) -> CsStatus {
    run("csCloseCSE", || close_handle(CSEHandle))
}

/// The device `Path` names: a device name itself (a URI or a state directory) or a path
/// inside a csx mount or a state directory.
fn device_name_of(path: &str) -> R<String> {
    if path.contains("://") {
        return Ok(path.to_string());
    }
    device_of_path(path)
}

/// The CSFs of the device `Path` names (csGetCSxFromPath's rules, or a device name):
/// `*Length` is the buffer's size in bytes; `*Count` receives the number of CSFs; a
/// buffer too small (or NULL) is answered with the size needed in `*Length`
/// (CS_INVALID_LENGTH when too small, CS_SUCCESS when NULL).
///
/// # Safety
/// `Path` a string or null; `Length`, `Count` null or writable; `Buffer` null or writable
/// for `*Length` bytes.
#[no_mangle]
pub unsafe extern "C" fn csQueryCSFList(
    Path: *const c_char,
    Length: *mut c_int,
    Count: *mut c_int,
    Buffer: *mut CsfUniqueId,
) -> CsStatus {
    run("csQueryCSFList", || {
        // SAFETY: the caller's contract.
        let path = unsafe { string(Path, "Path") }?;
        // SAFETY: the caller's contract.
        let len = unsafe { out(Length, "Length") }?;
        // SAFETY: the caller's contract.
        let count = unsafe { out(Count, "Count") }?;
        let name = device_name_of(path)?;
        let list = with_device(&name, |d| csf_names(d))?;
        let entry = std::mem::size_of::<CsfUniqueId>();
        let need = list.len() * entry;
        let have = *len;
        *len = need as c_int;
        *count = list.len() as c_int;
        if Buffer.is_null() {
            return Ok(CS_SUCCESS);
        }
        if (have.max(0) as usize) < need {
            return fail(
                CS_INVALID_LENGTH,
                format!("the buffer holds {have} bytes, {need} are needed (set in *Length)"),
            );
        }
        for (i, (n, id, _, _)) in list.iter().enumerate() {
            let mut u = CsfUniqueId {
                unique_name: [0; 32],
                global_id: u64::from(*id),
            };
            copy_name(&mut u.unique_name, n);
            // SAFETY: Buffer holds `have >= need` bytes (the caller's contract).
            unsafe { Buffer.add(i).write_unaligned(u) };
        }
        Ok(CS_SUCCESS)
    })
}

/// v0.5: the CSF names of the device `Path` names, comma-separated.
///
/// # Safety
/// `Path` a string or null; `Length` null or writable; `Buffer` null or writable for
/// `*Length` bytes.
#[no_mangle]
pub unsafe extern "C" fn csQueryFunctionList(
    Path: *const c_char,
    Length: *mut c_int,
    Buffer: *mut c_char,
) -> CsStatus {
    run("csQueryFunctionList", || {
        // SAFETY: the caller's contract.
        let path = unsafe { string(Path, "Path") }?;
        let name = device_name_of(path)?;
        let list = with_device(&name, |d| csf_names(d))?;
        let names: Vec<&str> = list.iter().map(|c| c.0.as_str()).collect();
        // SAFETY: forwarded contract.
        unsafe { write_string_int(&names.join(","), Length, Buffer) }
    })
}

/// Mount sources made by csx-fs (`csx mount`): `csx:` then the device URI, bytes other
/// than ASCII alphanumerics and `/:._-@+=~[]` written `%XX` (`csx_fs::mount::encode_fs_name`;
/// a test keeps the two in step). The URI, or `None` for another source.
pub fn device_of_mount_source(source: &[u8]) -> Option<String> {
    let encoded = source.strip_prefix(b"csx:")?;
    let mut out = Vec::with_capacity(encoded.len());
    let mut i = 0;
    while i < encoded.len() {
        if encoded[i] == b'%' {
            let hex = std::str::from_utf8(encoded.get(i + 1..i + 3)?).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(encoded[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// A `/proc/self/mountinfo` field with its octal escapes (`\040`) decoded.
fn unescape_mountinfo(field: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(field.len());
    let mut i = 0;
    while i < field.len() {
        let octal = field.get(i + 1..i + 4);
        match octal {
            Some(d) if field[i] == b'\\' && d.iter().all(|c| (b'0'..=b'7').contains(c)) => {
                out.push((d[0] - b'0') * 64 + (d[1] - b'0') * 8 + (d[2] - b'0'));
                i += 4;
            }
            _ => {
                out.push(field[i]);
                i += 1;
            }
        }
    }
    out
}

/// The device of the csx mount (FUSE, source `csx:URI`) holding `abs`, the innermost one
/// when mounts nest, from `mountinfo` (the text of `/proc/self/mountinfo`).
pub fn mounted_device(mountinfo: &[u8], abs: &std::path::Path) -> Option<String> {
    use std::os::unix::ffi::OsStrExt;
    let mut best: Option<(usize, String)> = None;
    for line in mountinfo.split(|&b| b == b'\n') {
        let fields: Vec<&[u8]> = line.split(|&b| b == b' ').collect();
        // Field 5 is the mount point; after "-" come the type and the source.
        let Some(dash) = fields.iter().position(|f| *f == b"-") else {
            continue;
        };
        if fields.len() < dash + 3 || dash < 5 {
            continue;
        }
        if fields[dash + 1] != b"fuse" && fields[dash + 1] != b"fuse.csx" {
            continue;
        }
        let Some(uri) = device_of_mount_source(&unescape_mountinfo(fields[dash + 2])) else {
            continue;
        };
        let point = unescape_mountinfo(fields[4]);
        let point = std::path::Path::new(std::ffi::OsStr::from_bytes(&point));
        let depth = point.components().count();
        if abs.starts_with(point) && best.as_ref().is_none_or(|(d, _)| depth > *d) {
            best = Some((depth, uri));
        }
    }
    best.map(|(_, uri)| uri)
}

/// The device a path belongs to (see [`csGetCSxFromPath`]).
fn device_of_path(path: &str) -> R<String> {
    let abs = std::fs::canonicalize(path).or_else(|e| fail(CS_ENOENT, format!("{path:?}: {e}")))?;
    let mountinfo = std::fs::read("/proc/self/mountinfo").unwrap_or_default();
    if let Some(uri) = mounted_device(&mountinfo, &abs) {
        return Ok(uri);
    }
    let dir = abs
        .ancestors()
        .find(|d| d.join("device.json").is_file())
        .ok_or(Fail {
            status: CS_NO_SUCH_ENTITY_EXISTS,
            message: format!("{path:?} is in no csx mount and no csx state directory"),
        })?;
    dir.to_str().map(str::to_string).ok_or(Fail {
        status: CS_INVALID_ARG,
        message: "the device path is not UTF-8".into(),
    })
}

/// The device a path belongs to, as a name for csOpenCSx: a device URI (`shm://`,
/// `tcp://`: a device path) names itself; for a path inside a mounted
/// csx file system (`csx mount`), the URI of the mount's device (found in
/// `/proc/self/mountinfo`); else the state directory holding (an ancestor of) `Path`, as
/// an absolute path. Neither: CS_NO_SUCH_ENTITY_EXISTS.
///
/// # Safety
/// `Path` is null or a string; `Length` is null or writable; `DevName` is null or
/// writable for `*Length` bytes.
#[no_mangle]
pub unsafe extern "C" fn csGetCSxFromPath(
    Path: *const c_char,
    Length: *mut c_uint,
    DevName: *mut c_char,
) -> CsStatus {
    run("csGetCSxFromPath", || {
        // SAFETY: the caller's contract.
        let path = unsafe { string(Path, "Path") }?;
        let name = device_name_of(path)?;
        // SAFETY: forwarded contract.
        unsafe { write_string_uint(&name, Length, DevName) }
    })
}

// -------------------------------------------------------------------------------------
// CSFs: download, activation, lookup.

fn slot(index: i32) -> R<Option<ProgramIndex>> {
    if index == CSX_ANY_INDEX {
        return Ok(None);
    }
    u16::try_from(index)
        .map(|i| Some(ProgramIndex(i)))
        .or_else(|_| {
            fail(
                CS_INVALID_ID,
                format!("Index {index} is not a program slot (or CSX_ANY_INDEX)"),
            )
        })
}

/// Loads (or with `unload`, empties) a slot through the handle's session: the shared
/// body of the download calls. A downloaded CSF is device state: it stays loaded when
/// the handle closes.
///
/// # Safety
/// `data` is null or readable for `length` bytes.
unsafe fn download(
    handle: &Handle,
    sub_type: i32,
    index: i32,
    unload: bool,
    length: c_int,
    data: *const c_void,
    entry: Option<&str>,
) -> R<ProgramIndex> {
    if unload {
        let Some(pind) = slot(index)? else {
            return fail(
                CS_INVALID_ID,
                "Unload needs a slot Index, not CSX_ANY_INDEX",
            );
        };
        // The program this handle found there, when it found one: never another
        // client's program put in the slot since.
        let generation = handle.generation_in(pind);
        handle.session().unload_slot(pind, generation)?;
        handle.forget_slot(pind);
        return Ok(pind);
    }
    let ptype = match sub_type {
        CSX_BPF_ELF => ProgramType::Elf,
        CSX_BPF_RAW => ProgramType::Raw,
        other => {
            return fail(
                CS_INVALID_OPTION,
                format!("SubType {other} is not CSX_BPF_ELF (0) or CSX_BPF_RAW ({CSX_BPF_RAW:#x})"),
            )
        }
    };
    if length <= 0 || length as u64 > u64::from(PROGRAM_SIZE_MAX) {
        return fail(
            CS_INVALID_LENGTH,
            format!("Length {length} is not within 1..={PROGRAM_SIZE_MAX}"),
        );
    }
    if data.is_null() {
        return fail(CS_INVALID_ARG, "DataBuffer is NULL");
    }
    // SAFETY: DataBuffer is readable for Length bytes (the caller's contract); Length is
    // at most PROGRAM_SIZE_MAX.
    let image = unsafe { std::slice::from_raw_parts(data.cast::<u8>(), length as usize) };
    let name = entry.unwrap_or("the CSF");
    let mut session = handle.session();
    let pind = match slot(index)? {
        None => session.load_program_entry(name, entry, ptype, image)?,
        Some(pind) => {
            session.load_program_at(name, entry, pind, ptype, image)?;
            pind
        }
    };
    session.leave_loaded(pind);
    Ok(pind)
}

/// v0.5: downloads an eBPF program (`Type` CS_BPF_PROGRAM, `SubType` CSX_BPF_ELF or
/// CSX_BPF_RAW) into slot `Index` (CSX_ANY_INDEX: the first empty one; find it with
/// `csGetCSFId`), or with `Unload` empties that slot. The ELF's first function in `.text`
/// is the entry (`csCSFDownload` can name another).
///
/// # Safety
/// `Info` is null or readable with `DataBuffer` readable for `Length` bytes.
#[no_mangle]
pub unsafe extern "C" fn csDownload(
    DevHandle: CsDevHandle,
    Info: *const CsDownloadInfo,
) -> CsStatus {
    run("csDownload", || {
        device(DevHandle)?;
        // SAFETY: the caller's contract.
        let info = unsafe { inp(Info, "Info") }?;
        if info.type_ != CS_BPF_PROGRAM {
            return fail(
                CS_UNSUPPORTED,
                format!(
                    "Type {}: csx runs eBPF programs only (CS_BPF_PROGRAM, 2)",
                    info.type_
                ),
            );
        }
        // SAFETY: forwarded contract.
        unsafe {
            download(
                &*handle_state(key_of(DevHandle))?,
                info.sub_type,
                info.index,
                info.unload != 0,
                info.length,
                info.data_buffer,
                None,
            )
        }?;
        Ok(CS_SUCCESS)
    })
}

/// v1.x: downloads a CSF (`type` CS_CSF_BPF_PROGRAM) into slot `Index` (CSX_ANY_INDEX:
/// the first empty one), `common.UniqueName` naming its ELF entry function (empty: the
/// first in `.text`); `*CSFId` (nullable) receives the slot. With `common.Unload` it
/// empties slot `Index`. `CSEEId` must be 0 (the device's eBPF environment); `GlobalId`
/// is not kept (a CSF's id is its slot).
///
/// # Safety
/// `Info` is null or readable with `DataBuffer` readable for `Length` bytes; `CSFId` is
/// null or writable.
#[no_mangle]
pub unsafe extern "C" fn csCSFDownload(
    DevHandle: CsDevHandle,
    Info: *const CsCsfDownloadInfo,
    CSFId: *mut u32,
) -> CsStatus {
    run("csCSFDownload", || {
        device(DevHandle)?;
        // SAFETY: the caller's contract.
        let info = unsafe { inp(Info, "Info") }?;
        if info.type_ != CS_CSF_BPF_PROGRAM {
            return fail(
                CS_UNSUPPORTED,
                format!(
                    "type {}: csx runs eBPF programs only (CS_CSF_BPF_PROGRAM, 2)",
                    info.type_
                ),
            );
        }
        if info.csee_id != 0 {
            return fail(
                CS_INVALID_ID,
                format!("CSEEId {}: a csx device has one CSEE, 0", info.csee_id),
            );
        }
        let name = &info.common.unique_name;
        let end = name.iter().position(|&b| b == 0).unwrap_or(name.len());
        let entry = std::str::from_utf8(&name[..end])
            .or_else(|_| fail(CS_INVALID_ARG, "common.UniqueName is not UTF-8"))?;
        let entry = (!entry.is_empty()).then_some(entry);
        // SAFETY: forwarded contract.
        let pind = unsafe {
            download(
                &*handle_state(key_of(DevHandle))?,
                info.sub_type,
                info.index as i32,
                info.common.unload != 0,
                info.common.length,
                info.common.data_buffer,
                entry,
            )
        }?;
        // SAFETY: the caller's contract.
        if let Some(id) = unsafe { CSFId.as_mut() } {
            *id = u32::from(pind.0);
        }
        Ok(CS_SUCCESS)
    })
}

/// Activates (`csConfig` `CS_CSF_ACTIVATE`, v1.x; `CS_CSF_TYPE` in v0.5) or deactivates.
pub(crate) fn config(dev: &Dev, activate: bool, sub_type: i32, index: i32) -> R<CsStatus> {
    let pind = csf_slot(u32::try_from(index).unwrap_or(u32::MAX))?;
    if !activate {
        dev.device.deactivate(pind)?;
        return Ok(CS_SUCCESS);
    }
    let engine = match sub_type {
        CSX_ENGINE_DEFAULT => {
            if dev.device.identify()?.jit {
                EngineKind::Jit
            } else {
                EngineKind::Interpreter
            }
        }
        CSX_ENGINE_INTERPRETER => EngineKind::Interpreter,
        CSX_ENGINE_JIT => EngineKind::Jit,
        other => {
            return fail(
                CS_INVALID_OPTION,
                format!("SubType {other} is not a CSX_ENGINE_* value (0..=2)"),
            )
        }
    };
    dev.device.activate(pind, engine)?;
    Ok(CS_SUCCESS)
}

/// Activates (verifies and prepares) the CSF in slot `Info->Index` (`CS_CSF_ACTIVATE`,
/// `SubType` a CSX_ENGINE_* value), or deactivates it (`CSX_CSF_DEACTIVATE`). CSEE and FDM
/// activation and vendor configuration are CS_UNSUPPORTED.
///
/// # Safety
/// `Info` is null or readable.
#[no_mangle]
pub unsafe extern "C" fn csConfig(CSEHandle: CsDevHandle, Info: *const CsConfigInfo) -> CsStatus {
    run("csConfig", || {
        let dev = device(CSEHandle)?;
        // SAFETY: the caller's contract.
        let info = unsafe { inp(Info, "Info") }?;
        match info.type_ {
            CS_CSF_ACTIVATE => config(&dev, true, info.sub_type, info.index),
            CSX_CSF_DEACTIVATE => config(&dev, false, info.sub_type, info.index),
            CS_CSEE_ACTIVATE | CS_FDM_ACTIVATE | CS_VENDOR_SPECIFIC => fail(
                CS_UNSUPPORTED,
                format!(
                    "Type {}: a csx device's CSEE (its eBPF engines) and FDM are always active",
                    info.type_
                ),
            ),
            other => fail(
                CS_INVALID_OPTION,
                format!("Type {other} is not a CS_CONFIG_TYPE (1..=4) or CSX_CSF_DEACTIVATE"),
            ),
        }
    })
}

/// The slots holding a CSF named `name`, by the name it was kept under (`csx program
/// load NAME`) or by its entry function (active ones first, then by slot).
pub(crate) fn slots_named(dev: &Dev, name: &str) -> R<Vec<u32>> {
    Ok(programs_named(dev, name)?
        .into_iter()
        .map(|found| u32::from(found.pind.0))
        .collect())
}

/// The programs named `name` (persistent or entry name), active ones first, each with
/// its generation from the same listing (so a slot and its generation always describe
/// one program). A device that predates generations (it refuses the listing as an
/// unknown opcode) is listed the old way, without generations.
pub(crate) fn programs_named(dev: &Dev, name: &str) -> R<Vec<crate::registry::FixedSlot>> {
    let programs = dev.device.programs_with_generations_if_known()?;
    let mut found: Vec<(bool, u16, Option<u64>)> = programs
        .into_iter()
        .filter(|p| p.persistent.as_deref() == Some(name) || p.name == name)
        .map(|p| (p.state != ProgramState::Active, p.pind.0, p.generation))
        .collect();
    found.sort_unstable();
    Ok(found
        .into_iter()
        .map(|(_, pind, generation)| crate::registry::FixedSlot {
            pind: ProgramIndex(pind),
            generation,
        })
        .collect())
}

/// The ids of the CSFs named `name`: its fixed id when it has one and is loaded, else
/// the slots holding it.
fn ids_named(dev: &Dev, name: &str) -> R<Vec<u32>> {
    let slots = slots_named(dev, name)?;
    match crate::fixed::id_of(&fixed_ids(dev)?, name) {
        Some(id) if !slots.is_empty() => Ok(vec![id]),
        _ => Ok(slots),
    }
}

/// The CSF whose id is `global` (a slot, or a fixed id whose program is loaded).
fn ids_of_global(dev: &Dev, global: u64) -> R<Vec<u32>> {
    let Ok(id) = u32::try_from(global) else {
        return Ok(Vec::new());
    };
    if crate::fixed::is_fixed(id) {
        return Ok(match crate::fixed::id_of_name(&fixed_ids(dev)?, id) {
            Some(name) if !slots_named(dev, &name)?.is_empty() => vec![id],
            _ => Vec::new(),
        });
    }
    Ok(dev
        .device
        .programs()?
        .iter()
        .filter(|p| u32::from(p.pind.0) == id)
        .map(|p| u32::from(p.pind.0))
        .collect())
}

/// The one FDM of a csx device, as `CSFIdInfo.FDMList` names it.
static FDM_ZERO: FdmAccess = FdmAccess {
    fdm_id: 0,
    relative_performance: 0,
    relative_power: 0,
    flags: FLAG_FDM_IS_DEVICE_MANAGED,
};

/// v1.x: the CSFs named `CSFName` (or, with `CSFName` NULL, the one whose id is
/// `GlobalId`, as csQueryCSFList reports it): `*Count` receives their number, `Buffer`
/// one CSFIdInfo each (active ones first). `*Length` is the buffer's size in bytes; too
/// small (or `Buffer` NULL) it receives the size needed (CS_INVALID_LENGTH when too small,
/// CS_SUCCESS when NULL). No such CSF: CS_INVALID_FUNCTION_NAME.
///
/// # Safety
/// `CSFName` null or a string; `Length`, `Count` null or writable; `Buffer` null or
/// writable for `*Length` bytes.
#[no_mangle]
pub unsafe extern "C" fn csGetCSFId(
    DevHandle: CsDevHandle,
    CSFName: *const c_char,
    GlobalId: u64,
    Length: *mut c_int,
    Count: *mut c_int,
    Buffer: *mut CsfIdInfo,
) -> CsStatus {
    run("csGetCSFId", || {
        let dev = device(DevHandle)?;
        // SAFETY: the caller's contract.
        let len = unsafe { out(Length, "Length") }?;
        // SAFETY: the caller's contract.
        let count = unsafe { out(Count, "Count") }?;
        let ids = if CSFName.is_null() {
            ids_of_global(&dev, GlobalId)?
        } else {
            // SAFETY: the caller's contract.
            let name = unsafe { string(CSFName, "CSFName") }?;
            ids_named(&dev, name)?
        };
        if ids.is_empty() {
            return fail(
                CS_INVALID_FUNCTION_NAME,
                if CSFName.is_null() {
                    format!("no CSF has GlobalId {GlobalId} on {}", dev.name)
                } else {
                    // SAFETY: the caller's contract (checked above).
                    let name = unsafe { string(CSFName, "CSFName") }?;
                    format!("no CSF named {name:?} on {}", dev.name)
                },
            );
        }
        let need = ids.len() * std::mem::size_of::<CsfIdInfo>();
        let have = *len;
        *len = need as c_int;
        *count = ids.len() as c_int;
        if Buffer.is_null() {
            return Ok(CS_SUCCESS);
        }
        if (have.max(0) as usize) < need {
            return fail(
                CS_INVALID_LENGTH,
                format!("the buffer holds {have} bytes, {need} are needed (set in *Length)"),
            );
        }
        for (i, id) in ids.iter().enumerate() {
            let info = CsfIdInfo {
                csf_id: *id,
                relative_performance: 0,
                count: 1,
                num_fdms: 1,
                fdm_list: &FDM_ZERO,
            };
            // SAFETY: Buffer holds `have >= need` bytes (the caller's contract).
            unsafe { Buffer.add(i).write_unaligned(info) };
        }
        Ok(CS_SUCCESS)
    })
}

/// v0.5: the id of the CSF named `FunctionName` (an active one first). `Context` is
/// unused.
///
/// # Safety
/// `FunctionName` null or a string; `FunctionId` null or writable.
#[no_mangle]
pub unsafe extern "C" fn csGetFunction(
    CSEHandle: CsDevHandle,
    FunctionName: *const c_char,
    Context: *mut c_void,
    FunctionId: *mut u32,
) -> CsStatus {
    let _ = Context;
    run("csGetFunction", || {
        let dev = device(CSEHandle)?;
        // SAFETY: the caller's contract.
        let name = unsafe { string(FunctionName, "FunctionName") }?;
        // SAFETY: the caller's contract.
        let id = unsafe { out(FunctionId, "FunctionId") }?;
        match ids_named(&dev, name)?.first() {
            Some(s) => {
                *id = *s;
                Ok(CS_SUCCESS)
            }
            None => fail(
                CS_INVALID_FUNCTION_NAME,
                format!("no CSF named {name:?} on {}", dev.name),
            ),
        }
    })
}

/// v0.5: the device's CSFs as `CsFunctionInfo` (downloadable, then built-in). `*Size` is
/// the buffer's size in bytes; too small (or `FunctionInfo` NULL) it receives the size
/// needed (CS_INVALID_LENGTH when too small, CS_SUCCESS when NULL).
///
/// # Safety
/// `Size` null or writable; `FunctionInfo` null or writable for `*Size` bytes.
#[no_mangle]
pub unsafe extern "C" fn csQueryDeviceForComputeList(
    DevHandle: CsDevHandle,
    Size: *mut c_int,
    FunctionInfo: *mut CsFunctionInfo,
) -> CsStatus {
    run("csQueryDeviceForComputeList", || {
        let dev = device(DevHandle)?;
        // SAFETY: the caller's contract.
        let size = unsafe { out(Size, "Size") }?;
        let list = csf_names(&dev)?;
        let need = list.len() * std::mem::size_of::<CsFunctionInfo>();
        let have = *size;
        *size = need as c_int;
        if FunctionInfo.is_null() {
            return Ok(CS_SUCCESS);
        }
        if (have.max(0) as usize) < need {
            return fail(
                CS_INVALID_LENGTH,
                format!("the buffer holds {have} bytes, {need} are needed (set in *Size)"),
            );
        }
        let units = u8::try_from(dev.device.identify()?.engines).unwrap_or(u8::MAX);
        for (i, (n, id, _, _)) in list.iter().enumerate() {
            let mut f = CsFunctionInfo {
                function_id: *id,
                num_units: units,
                name: [0; 32],
            };
            copy_name(&mut f.name, n);
            // SAFETY: FunctionInfo holds `have >= need` bytes (the caller's contract).
            unsafe { FunctionInfo.add(i).write_unaligned(f) };
        }
        Ok(CS_SUCCESS)
    })
}

/// csx extension: the device's CSFs with their slots and states (`*Count`: the buffer's
/// capacity in entries; it receives the number of CSFs; CS_INVALID_LENGTH when they do
/// not fit; `Buf` NULL asks for the count).
///
/// # Safety
/// `Count` is null or writable; `Buf` is null or writable for `*Count` entries.
#[no_mangle]
pub unsafe extern "C" fn csxQueryCSFList(
    DevHandle: CsDevHandle,
    Count: *mut c_int,
    Buf: *mut CsxCsfInfo,
) -> CsStatus {
    run("csxQueryCSFList", || {
        let dev = device(DevHandle)?;
        // SAFETY: the caller's contract.
        let count = unsafe { out(Count, "Count") }?;
        let list: Vec<CsxCsfInfo> = csf_names(&dev)?
            .into_iter()
            .map(|(n, id, downloadable, active)| {
                let mut c = CsxCsfInfo {
                    unique_name: [0; 32],
                    csf_id: id,
                    downloadable: downloadable.into(),
                    active: active.into(),
                };
                copy_name(&mut c.unique_name, &n);
                c
            })
            .collect();
        let have = *count;
        *count = list.len() as c_int;
        if Buf.is_null() {
            return Ok(CS_SUCCESS);
        }
        if (have.max(0) as usize) < list.len() {
            return fail(
                CS_INVALID_LENGTH,
                format!(
                    "the buffer holds {have} entries, the device has {} CSFs",
                    list.len()
                ),
            );
        }
        // SAFETY: Buf holds *Count >= list.len() entries (the caller's contract).
        unsafe { std::ptr::copy_nonoverlapping(list.as_ptr(), Buf, list.len()) };
        Ok(CS_SUCCESS)
    })
}

// -------------------------------------------------------------------------------------
// Properties, capabilities, statistics.

/// The device's properties: one CSE (the device's engines), `*Length` the buffer's size
/// in bytes; when it is smaller than `sizeof(CSxProperties)` it receives that size and
/// the call is CS_INVALID_LENGTH.
///
/// # Safety
/// `Length` is null or writable; `Buffer` is null or writable for `*Length` bytes.
#[no_mangle]
pub unsafe extern "C" fn csQueryDeviceProperties(
    DevHandle: CsDevHandle,
    Length: *mut c_int,
    Buffer: *mut CsxProperties,
) -> CsStatus {
    run("csQueryDeviceProperties", || {
        let dev = device(DevHandle)?;
        // SAFETY: the caller's contract.
        let len = unsafe { out(Length, "Length") }?;
        let need = std::mem::size_of::<CsxProperties>() as c_int;
        if *len < need || Buffer.is_null() {
            let have = *len;
            *len = need;
            return fail(
                CS_INVALID_LENGTH,
                format!("the buffer holds {have} bytes, CSxProperties needs {need}"),
            );
        }
        let info = dev.device.identify()?;
        let csfs = csf_names(&dev)?.len();
        let mut version = info
            .version
            .split('.')
            .map(|p| p.parse::<u16>().unwrap_or(0));
        let sw = (version.next().unwrap_or(0) << 8) | (version.next().unwrap_or(0) & 0xff);
        let mut flags = FLAG_FDM_IS_DEVICE_MANAGED;
        if crate::api::can_map(&dev) {
            flags |= FLAG_FDM_IS_HOST_VISIBLE;
        }
        let mut p = CsxProperties {
            hw_version: 0,
            sw_version: sw,
            vendor_id: 0,
            device_id: 0,
            friendly_name: [0; 32],
            cf_min_mb: 0,
            fdm_in_mb: u32::try_from(info.slm_size_bytes >> 20).unwrap_or(u32::MAX),
            flags,
            num_cses: 1,
            cse: [CseProperties {
                hw_version: 0,
                sw_version: sw,
                unique_name: [0; 32],
                num_builtin_functions: u16::try_from(csfs).unwrap_or(u16::MAX),
                max_requests_per_batch: CSX_BATCH_ENTRIES_MAX as u32,
                max_function_parameters_allowed: CSX_COMPUTE_ARGS_MAX as u32,
                max_concurrent_function_instances: info.engines,
            }],
        };
        copy_name(&mut p.friendly_name, &dev.name);
        copy_name(&mut p.cse[0].unique_name, &dev.name);
        // SAFETY: non-null and writable for *Length >= sizeof bytes (the caller's contract).
        unsafe { Buffer.write_unaligned(p) };
        Ok(CS_SUCCESS)
    })
}

/// csx extension: what csx knows of the device beyond CSxProperties (its URI, sizes and
/// limits).
///
/// # Safety
/// `Info` is null or writable.
#[no_mangle]
pub unsafe extern "C" fn csxQueryDeviceInfo(
    DevHandle: CsDevHandle,
    Info: *mut CsxDeviceInfo,
) -> CsStatus {
    run("csxQueryDeviceInfo", || {
        let dev = device(DevHandle)?;
        // SAFETY: the caller's contract.
        let out = unsafe { out(Info, "Info") }?;
        let info = dev.device.identify()?;
        let mut d = CsxDeviceInfo {
            uri: [0; 256],
            sw_version: [0; 32],
            abi_version: info.abi_version,
            engines: info.engines,
            fdm_size_bytes: info.slm_size_bytes,
            fdm_free_bytes: info.slm_free_bytes,
            nvm_size_bytes: info.nvm_size_bytes,
            program_slots: info.program_slots.into(),
            max_active_programs: info.programs_active_max.into(),
            max_afdm_args: WINDOWS_MAX as u32,
            max_program_bytes: info.program_size_max,
        };
        copy_name(&mut d.uri, &dev.name);
        copy_name(&mut d.sw_version, &info.version);
        *out = d;
        Ok(CS_SUCCESS)
    })
}

/// The fixed-function capability bits: bit i is set when a CSF (downloaded or built in)
/// is named `CAPABILITY_NAMES[i]` (case-insensitively: "Checksum", "checksum", ...).
///
/// # Safety
/// `Caps` is null or writable.
#[no_mangle]
pub unsafe extern "C" fn csQueryDeviceCapabilities(
    DevHandle: CsDevHandle,
    Caps: *mut CsCapabilities,
) -> CsStatus {
    run("csQueryDeviceCapabilities", || {
        let dev = device(DevHandle)?;
        // SAFETY: the caller's contract.
        let caps = unsafe { out(Caps, "Caps") }?;
        let names = csf_names(&dev)?;
        let mut bits = 0u64;
        for (i, cap) in CAPABILITY_NAMES.iter().enumerate() {
            if names.iter().any(|n| n.0.eq_ignore_ascii_case(cap)) {
                bits |= 1 << i;
            }
        }
        caps.functions = bits;
        Ok(CS_SUCCESS)
    })
}

/// Statistics of the CSE (CS_STAT_CSE_USAGE: its executions), the device's memory
/// (CS_STAT_CSx_MEM_USAGE: allocated and free bytes) or one CSF (CS_STAT_FUNCTION;
/// `Identifier` points to its CS_CSF_ID: its executions). Fields csx does not keep
/// (times, transfer totals, allocation counts) are 0.
///
/// # Safety
/// `Identifier` is null or a readable CS_CSF_ID; `Stats` is null or writable.
#[no_mangle]
pub unsafe extern "C" fn csQueryDeviceStatistics(
    DevHandle: CsDevHandle,
    Type: i32,
    Identifier: *mut c_void,
    Stats: *mut CsStatsInfo,
) -> CsStatus {
    run("csQueryDeviceStatistics", || {
        let dev = device(DevHandle)?;
        // SAFETY: the caller's contract.
        let stats = unsafe { out(Stats, "Stats") }?;
        let mut st = CsStatsInfo {
            memory_details: CsxMemory::default(),
        };
        match Type {
            CS_STAT_CSE_USAGE => {
                let total = dev.device.programs()?.iter().map(|p| p.executions).sum();
                st.cse_details = CseUsage {
                    total_function_executions: total,
                    ..CseUsage::default()
                };
            }
            CS_STAT_CSX_MEM_USAGE => {
                let info = dev.device.identify()?;
                st.memory_details = CsxMemory {
                    total_allocated_fdm: info.slm_size_bytes - info.slm_free_bytes,
                    largest_block_available_fdm: info.slm_free_bytes,
                    total_free_csfm: info.slm_free_bytes,
                    ..CsxMemory::default()
                };
            }
            CS_STAT_FUNCTION => {
                // SAFETY: the caller's contract.
                let id = *unsafe { inp(Identifier.cast_const().cast::<CsCsfId>(), "Identifier") }?;
                let pind = csf_slot(id)?;
                let p = dev.device.programs()?.into_iter().find(|p| p.pind == pind);
                let Some(p) = p else {
                    return fail(
                        CS_UNKNOWN_COMPUTE_FUNCTION,
                        format!("CSF {id} is an empty slot"),
                    );
                };
                st.function_details = CsfUsage {
                    total_executions: p.executions,
                    ..CsfUsage::default()
                };
            }
            other => {
                return fail(
                    CS_INVALID_OPTION,
                    format!("Type {other} is not a CS_STAT_TYPE (1..=3)"),
                )
            }
        }
        *stats = st;
        Ok(CS_SUCCESS)
    })
}

/// The library's support of `Type`: CS_FILE_SYSTEMS_SUPPORTED lists "csx" (the file
/// system `csx mount` serves, whose paths csGetCSxFromPath resolves).
///
/// # Safety
/// `Length` null or writable; `Buffer` null or writable for `*Length` bytes.
#[no_mangle]
pub unsafe extern "C" fn csQueryLibrarySupport(
    Type: i32,
    Length: *mut c_int,
    Buffer: *mut c_char,
) -> CsStatus {
    run("csQueryLibrarySupport", || match Type {
        // SAFETY: forwarded contract.
        CS_FILE_SYSTEMS_SUPPORTED => unsafe { write_string_int("csx", Length, Buffer) },
        other => fail(
            CS_INVALID_OPTION,
            format!("Type {other} is not CS_FILE_SYSTEMS_SUPPORTED (1)"),
        ),
    })
}

// -------------------------------------------------------------------------------------
// What csx does not provide.

fn unsupported(what: &str) -> R<CsStatus> {
    fail(CS_UNSUPPORTED, what.to_string())
}

/// Not provided: csx devices raise no notifications.
#[no_mangle]
pub extern "C" fn csRegisterNotify(
    DevName: *const c_char,
    NotifyOptions: u32,
    NotifyFn: *mut c_void,
) -> CsStatus {
    let _ = (DevName, NotifyOptions, NotifyFn);
    run("csRegisterNotify", || {
        unsupported("csx devices raise no notifications")
    })
}

/// Not provided (see csRegisterNotify).
#[no_mangle]
pub extern "C" fn csDeregisterNotify(DevName: *const c_char, NotifyFn: *mut c_void) -> CsStatus {
    let _ = (DevName, NotifyFn);
    run("csDeregisterNotify", || {
        unsupported("csx devices raise no notifications")
    })
}

/// Not provided: a csx device has no settable temperature or I/O capability.
#[no_mangle]
pub extern "C" fn csSetDeviceCapability(
    DevHandle: CsDevHandle,
    Type: i32,
    Details: *mut c_void,
) -> CsStatus {
    let _ = (Type, Details);
    run("csSetDeviceCapability", || {
        device(DevHandle)?;
        unsupported("a csx device has no settable capability")
    })
}

/// Not provided: csx has no streams.
#[no_mangle]
pub extern "C" fn csAllocStream(
    DevHandle: CsDevHandle,
    Type: i32,
    StreamHandle: *mut u64,
) -> CsStatus {
    let _ = (Type, StreamHandle);
    run("csAllocStream", || {
        device(DevHandle)?;
        unsupported("csx provides no streams")
    })
}

/// Not provided (see csAllocStream).
#[no_mangle]
pub extern "C" fn csFreeStream(StreamHandle: u64) -> CsStatus {
    let _ = StreamHandle;
    run("csFreeStream", || unsupported("csx provides no streams"))
}

/// Not provided: libcsx's transports are built in, not plugins.
#[no_mangle]
pub extern "C" fn csQueryPlugin(Req: *mut c_void, CallbackFn: *mut c_void) -> CsStatus {
    let _ = (Req, CallbackFn);
    run("csQueryPlugin", || {
        unsupported("libcsx's transports are built in, not plugins")
    })
}

/// Not provided (see csQueryPlugin).
#[no_mangle]
pub extern "C" fn csRegisterPlugin(Req: *mut c_void) -> CsStatus {
    let _ = Req;
    run("csRegisterPlugin", || {
        unsupported("libcsx's transports are built in, not plugins")
    })
}

/// Not provided (see csQueryPlugin).
#[no_mangle]
pub extern "C" fn csDeregisterPlugin(Req: *mut c_void) -> CsStatus {
    let _ = Req;
    run("csDeregisterPlugin", || {
        unsupported("libcsx's transports are built in, not plugins")
    })
}

/// v0.5, not provided: a CSF id names a slot, not a running instance; abort a request
/// with csAbortRequest (its handle from csxQueueComputeRequest).
#[no_mangle]
pub extern "C" fn csStopFunction(FunctionId: u32) -> CsStatus {
    let _ = FunctionId;
    run("csStopFunction", || {
        unsupported(
            "a CSF id names a slot, not a running instance: abort its request with csAbortRequest",
        )
    })
}

/// v0.5, not provided: aborting every request of the CSE; close the handle, or abort
/// requests one by one.
#[no_mangle]
pub extern "C" fn csAbortCSE(CSEHandle: CsDevHandle) -> CsStatus {
    run("csAbortCSE", || {
        device(CSEHandle)?;
        unsupported("abort requests with csAbortRequest, or close the handle (csCloseCSE aborts its device's queue when it is the last)")
    })
}

/// v0.5, not provided: resetting a CSE.
#[no_mangle]
pub extern "C" fn csResetCSE(CSEHandle: CsDevHandle) -> CsStatus {
    run("csResetCSE", || {
        device(CSEHandle)?;
        unsupported("a csx CSE has no reset: close and reopen the device")
    })
}
#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mountinfo_lines_name_the_innermost_csx_mount() {
        let info = b"22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw\n\
36 22 0:40 / /mnt/a\\040b rw,nosuid - fuse csx:tcp://127.0.0.1:4420 rw,user_id=0\n\
37 36 0:41 / /mnt/a\\040b/inner rw - fuse.csx csx:shm://d%2C1 rw\n\
38 22 0:42 / /mnt/other rw - fuse sshfs#host: rw\n\
39 22 0:43 / /mnt/old rw - fuse csx rw\n";
        let at = |p: &str| mounted_device(info, std::path::Path::new(p));
        assert_eq!(at("/mnt/a b/x/y").as_deref(), Some("tcp://127.0.0.1:4420"));
        assert_eq!(at("/mnt/a b").as_deref(), Some("tcp://127.0.0.1:4420"));
        assert_eq!(at("/mnt/a b/inner/f").as_deref(), Some("shm://d,1"));
        assert_eq!(at("/mnt/a bc/f"), None);
        assert_eq!(at("/mnt/other/f"), None);
        assert_eq!(at("/mnt/old/f"), None);
        assert_eq!(at("/home"), None);
        assert_eq!(device_of_mount_source(b"csx:%4"), None);
    }
}
