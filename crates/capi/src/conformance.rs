//! The conformance table of `docs/capi.md`: every function and type of the SNIA CS API
//! (v1.x, and the v0.5 calls libcsx also keeps) with what csx does with it, and the list
//! of csx's extensions. A test fails when the doc drifts from [`table`] or when a spec
//! function the library exports, or a type or enum of the header, is missing from it.

/// How csx provides an item.
pub const SUPPORTED: &str = "supported";
/// Provided with a csx meaning (said in the note).
pub const MAPPED: &str = "mapped";
/// Not provided: the call returns the status in the note.
pub const UNSUPPORTED: &str = "unsupported";

/// `(item, kind, support, note)`.
pub type Row = (&'static str, &'static str, &'static str, &'static str);

/// Every spec function and type.
pub fn table() -> Vec<Row> {
    vec![
        ("csQueryCSxList", "function", SUPPORTED, "the URIs in `CSX_DEVICES` (comma-separated) and the devices this process has open"),
        ("csQueryCSEList", "function", MAPPED, "a CSE is its device: the devices of csQueryCSxList holding a CSF of that name"),
        ("csQueryCSFList", "function", SUPPORTED, "`Path` a device name or a path (csGetCSxFromPath's rules); `GlobalId` = the CSF id"),
        ("csQueryFunctionList", "function", SUPPORTED, "v0.5: the CSF names, comma-separated"),
        ("csGetCSxFromPath", "function", SUPPORTED, "a path in a `csx mount` (its device URI), in a state directory, or a device URI itself"),
        ("csOpenCSx", "function", SUPPORTED, "one device per process: a second open of the same device shares it"),
        ("csCloseCSx", "function", SUPPORTED, "frees the handle's allocations; the last handle aborts the device's queue"),
        ("csGetCSEFromCSx", "function", MAPPED, "the CSE's name is the device's"),
        ("csOpenCSE", "function", MAPPED, "`csOpenCSx` of the CSE's (device's) name"),
        ("csCloseCSE", "function", MAPPED, "`csCloseCSx`"),
        ("csRegisterNotify", "function", UNSUPPORTED, "`CS_UNSUPPORTED`: csx devices raise no notifications"),
        ("csDeregisterNotify", "function", UNSUPPORTED, "`CS_UNSUPPORTED`"),
        ("csAllocMem", "function", SUPPORTED, "`VAddressPtr`: a host mapping of the device memory itself (embedded, shm; whole pages) or `CS_COULD_NOT_MAP_MEMORY` (tcp)"),
        ("csFreeMem", "function", SUPPORTED, "v1.x `MemFlags` clears or fills before the free; the mapping is unmapped"),
        ("csInitMem", "function", SUPPORTED, "SLM Memory Fill"),
        ("csQueueStorageRequest", "function", SUPPORTED, "file I/O (`FileHandle` from `csxOpenFile`), block LOAD; block STORE is `CS_UNSUPPORTED` (csx writes storage through its file store)"),
        ("csQueueCopyMemRequest", "function", SUPPORTED, "SLM Memory Write / Read"),
        ("csGetCSFId", "function", SUPPORTED, "by name (or `GlobalId` = id); one FDM, `RelativePerformance` 0, `Count` 1"),
        ("csGetFunction", "function", SUPPORTED, "v0.5: by name"),
        ("csStopFunction", "function", UNSUPPORTED, "`CS_UNSUPPORTED`: a CSF id names a slot, not a running instance (use csAbortRequest)"),
        ("csQueueComputeRequest", "function", SUPPORTED, "Execute Program; AFDM args are windows, values cparam1/2 then params; stream and descriptor args `CS_UNSUPPORTED`"),
        ("csHelperSetComputeArg", "function", SUPPORTED, "exported (C); a Type outside the enum makes the request `CS_INVALID_OPTION`"),
        ("csAllocBatchRequest", "function", SUPPORTED, "every mode runs one topological order of the entries"),
        ("csAddBatchEntry", "function", SUPPORTED, "the entry is copied; `reqLength` covers entries longer than the union"),
        ("csHelperReconfigureBatchEntry", "function", SUPPORTED, "replaces an entry, keeping its edges"),
        ("csHelperResizeBatchRequest", "function", SUPPORTED, "not below the entries held"),
        ("csQueueBatchRequest", "function", SUPPORTED, "library-side; `CompValue` = entries completed"),
        ("csFreeBatchRequest", "function", SUPPORTED, ""),
        ("csCreateEvent", "function", SUPPORTED, ""),
        ("csDeleteEvent", "function", SUPPORTED, ""),
        ("csPollEvent", "function", SUPPORTED, "`Context` is read as a `void **` receiving the request's context"),
        ("csAbortRequest", "function", SUPPORTED, "queued: aborted; running compute: device Abort; running transfer: `CS_HANDLE_IN_USE`"),
        ("csQueryDeviceProperties", "function", MAPPED, "one CSE (the device's engines); `FriendlyName` the device name, truncated"),
        ("csQueryDeviceCapabilities", "function", MAPPED, "a bit is set when a CSF of that name (any case) is on the device"),
        ("csQueryDeviceStatistics", "function", MAPPED, "executions and memory; fields csx does not keep (times, transfer totals) are 0"),
        ("csQueryDeviceForComputeList", "function", SUPPORTED, "v0.5: every CSF, `NumUnits` = engines"),
        ("csSetDeviceCapability", "function", UNSUPPORTED, "`CS_UNSUPPORTED`: nothing to set"),
        ("csConfig", "function", SUPPORTED, "`CS_CSF_ACTIVATE` (v0.5 `CS_CSF_TYPE`); CSEE, FDM and vendor types `CS_UNSUPPORTED`"),
        ("csCSFDownload", "function", SUPPORTED, "eBPF (`CS_CSF_BPF_PROGRAM`); `UniqueName` the ELF entry; other types `CS_UNSUPPORTED`"),
        ("csDownload", "function", SUPPORTED, "v0.5: eBPF (`CS_BPF_PROGRAM`); other types `CS_UNSUPPORTED`"),
        ("csAbortCSE", "function", UNSUPPORTED, "`CS_UNSUPPORTED` (abort requests one by one)"),
        ("csResetCSE", "function", UNSUPPORTED, "`CS_UNSUPPORTED`"),
        ("csAllocStream", "function", UNSUPPORTED, "`CS_UNSUPPORTED`: no streams"),
        ("csFreeStream", "function", UNSUPPORTED, "`CS_UNSUPPORTED`"),
        ("csQueryLibrarySupport", "function", MAPPED, "`CS_FILE_SYSTEMS_SUPPORTED`: \"csx\""),
        ("csQueryPlugin", "function", UNSUPPORTED, "`CS_UNSUPPORTED`: transports are built in"),
        ("csRegisterPlugin", "function", UNSUPPORTED, "`CS_UNSUPPORTED`"),
        ("csDeregisterPlugin", "function", UNSUPPORTED, "`CS_UNSUPPORTED`"),
        ("CS_STATUS", "enum", SUPPORTED, "the spec's order from `CS_SUCCESS` 0 (with `CS_ENOENT` 7)"),
        ("CS_DOWNLOAD_TYPE", "enum", SUPPORTED, "`CS_BPF_PROGRAM` 2 only"),
        ("CS_CSF_RESOURCE_TYPE", "enum", SUPPORTED, "`CS_CSF_BPF_PROGRAM` 2 only"),
        ("CS_CONFIG_TYPE", "enum", SUPPORTED, "v1.x (`CS_CSF_ACTIVATE` 2); v0.5's under `CS_API_V05`"),
        ("CS_MEM_COPY_TYPE", "enum", SUPPORTED, ""),
        ("CS_STORAGE_REQ_MODE", "enum", SUPPORTED, ""),
        ("CS_STORAGE_IO_TYPE", "enum", SUPPORTED, ""),
        ("CS_COMPUTE_ARG_TYPE", "enum", SUPPORTED, "stream (`CS_STREAM_TYPE_`) and descriptor arguments `CS_UNSUPPORTED`"),
        ("CS_BATCH_MODE", "enum", SUPPORTED, ""),
        ("CS_BATCH_REQ_TYPE", "enum", SUPPORTED, ""),
        ("CS_STAT_TYPE", "enum", SUPPORTED, ""),
        ("CS_CAP_TYPE", "enum", UNSUPPORTED, "csSetDeviceCapability is `CS_UNSUPPORTED`"),
        ("CS_STREAM_TYPE", "enum", UNSUPPORTED, "no streams"),
        ("CS_LIBRARY_SUPPORT", "enum", SUPPORTED, ""),
        ("CS_PLUGIN_TYPE", "enum", UNSUPPORTED, "no plugins"),
        ("CS_FDM_FLAG_TYPE", "enum", SUPPORTED, ""),
        ("CsMemFlags", "type", SUPPORTED, "`FDMId` 0; `FillValue` a byte"),
        ("CsDevAFDM", "type", SUPPORTED, ""),
        ("CsCopyMemRequest", "type", SUPPORTED, "`Bytes` 32-bit"),
        ("CsBlockRange", "type", SUPPORTED, "`NamespaceId` 1, LBAs of 512 bytes"),
        ("CsBlockIo", "type", SUPPORTED, "v1.x: inline ranges, `StorageIndex` 0; v0.5's one-range form under `CS_API_V05`"),
        ("CsFileIo", "type", SUPPORTED, "`FileHandle` from `csxOpenFile`"),
        ("CsStorageRequest", "type", SUPPORTED, ""),
        ("CsComputeArg", "type", SUPPORTED, ""),
        ("CsComputeRequest", "type", SUPPORTED, "`DevHandle`/`CSFId`, also named `CSEHandle`/`FunctionId` (v0.5)"),
        ("CsBatchRequest", "type", SUPPORTED, "inline union"),
        ("CSEProperties", "type", MAPPED, "see csQueryDeviceProperties"),
        ("CSxProperties", "type", MAPPED, "see csQueryDeviceProperties"),
        ("CsCapabilities", "type", MAPPED, "see csQueryDeviceCapabilities"),
        ("CSEUsage", "type", MAPPED, "`TotalFunctionExecutions`"),
        ("CSxMemory", "type", MAPPED, "allocated and free bytes"),
        ("CSFUsage", "type", MAPPED, "`TotalExecutions`"),
        ("CsStatsInfo", "type", SUPPORTED, ""),
        ("CsConfigInfo", "type", SUPPORTED, "`Length`/`DataBuffer` unused"),
        ("CsDownloadInfo", "type", SUPPORTED, "v0.5"),
        ("CsCommonDownloadInfo", "type", SUPPORTED, ""),
        ("CsCSFDownloadInfo", "type", SUPPORTED, "`GlobalId` not kept; `CSEEId` 0"),
        ("FDMFlags", "type", SUPPORTED, ""),
        ("FDMAccess", "type", SUPPORTED, ""),
        ("CSFIdInfo", "type", SUPPORTED, "`FDMList` is the library's, valid for the process"),
        ("CSFUniqueId", "type", SUPPORTED, ""),
        ("CsFunctionInfo", "type", SUPPORTED, "v0.5"),
        ("CsCapabilityInfo", "type", UNSUPPORTED, "csSetDeviceCapability is `CS_UNSUPPORTED`"),
        ("CsQueryPluginRequest", "type", UNSUPPORTED, "no plugins"),
        ("CsPluginRequest", "type", UNSUPPORTED, "no plugins"),
    ]
}

/// The markdown of the table.
pub fn markdown() -> String {
    let mut t = String::from("| item | kind | csx | note |\n|---|---|---|---|\n");
    for (item, kind, support, note) in table() {
        t.push_str(&format!("| `{item}` | {kind} | {support} | {note} |\n"));
    }
    t
}

/// The markdown list of csx's extensions: its functions (exported `csx*`, not the v0.5
/// `csx05*` forms) and constants.
pub fn extensions() -> String {
    let mut t = String::from("Functions: ");
    let mut names = Vec::new();
    for src in [include_str!("api.rs"), include_str!("manage.rs")] {
        for line in src.lines() {
            if let Some(rest) = line.split("extern \"C\" fn ").nth(1) {
                let name = rest.split('(').next().unwrap_or_default();
                if name.starts_with("csx") && !name.starts_with("csx05") {
                    names.push(format!("`{name}`"));
                }
            }
        }
    }
    t.push_str(&names.join(", "));
    t.push_str(".\n\nConstants: ");
    let mut consts: Vec<String> = crate::header::constants()
        .iter()
        .map(|(n, v)| format!("`{n}` ({v})"))
        .collect();
    consts.push(format!(
        "`CSX_ABORTED` ({}, a `CS_STATUS`)",
        crate::status::CSX_ABORTED
    ));
    t.push_str(&consts.join(", "));
    t.push_str(".\n");
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    fn section(doc: &str, marker: &str) -> (usize, usize) {
        let (begin, end) = (
            format!("<!-- {marker} -->\n"),
            format!("<!-- /{marker} -->"),
        );
        let (Some(a), Some(b)) = (doc.find(&begin), doc.find(&end)) else {
            panic!("docs/capi.md lacks the {marker} markers");
        };
        (a + begin.len(), b)
    }

    #[test]
    fn the_conformance_table_in_docs_is_current() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/capi.md");
        let mut doc = std::fs::read_to_string(path).unwrap_or_default();
        let write = std::env::var_os("CSX_CAPI_WRITE_HEADER").is_some();
        for (marker, text) in [
            ("conformance-table", markdown()),
            ("extensions", extensions()),
        ] {
            let (a, b) = section(&doc, marker);
            if write {
                doc = format!("{}{text}{}", &doc[..a], &doc[b..]);
            } else {
                assert!(
                    doc[a..b] == text,
                    "docs/capi.md's {marker} is stale: run `CSX_CAPI_WRITE_HEADER=1 cargo test -p csx-capi --lib`"
                );
            }
        }
        if write {
            std::fs::write(path, doc).expect("write docs/capi.md");
        }
    }

    #[test]
    fn every_spec_function_and_type_is_in_the_table() {
        let items: Vec<&str> = table().iter().map(|r| r.0).collect();
        for src in [include_str!("api.rs"), include_str!("manage.rs")] {
            for line in src.lines() {
                if let Some(rest) = line.split("extern \"C\" fn ").nth(1) {
                    let name = rest.split('(').next().unwrap_or_default();
                    if !name.starts_with("csx") {
                        assert!(
                            items.contains(&name),
                            "{name} is not in the conformance table"
                        );
                    }
                }
            }
        }
        for (ty, _) in crate::header::enums() {
            assert!(items.contains(&ty), "{ty} is not in the conformance table");
        }
        for (ty, _, _, _) in crate::header::layouts() {
            assert!(
                ty.starts_with("Csx") || items.contains(&ty),
                "{ty} is not in the conformance table"
            );
        }
    }
}
