//! The assembler and disassembler against the bpf_conformance suite, read in place.
//!
//! Method: assemble the `-- asm` section of every `data/*.data` file and compare the
//! slots with the pre-assembled `code` in `vectors.json`; then disassemble and assemble
//! again, which must give the same slots. The suite lives in `../shared/conformance`
//! (or `$CSX_SHARED_DIR/conformance`); if it is missing the test fails, never skips.

use std::collections::BTreeMap;
use std::path::PathBuf;

use csx_ebpf::asm::assemble;
use csx_ebpf::disasm::disassemble;
use csx_ebpf::isa::{decode_all, Insn};

/// The suite's directory; `csx_testkit::tools::shared_dir` fails loudly without it.
fn conformance_dir() -> PathBuf {
    csx_testkit::tools::shared_dir().join("conformance")
}

/// The body of the `-- asm` section of a `.data` file.
fn asm_section(text: &str) -> String {
    let mut body = String::new();
    let mut inside = false;
    for line in text.lines() {
        if let Some(name) = line.strip_prefix("--") {
            inside = name.trim() == "asm";
            continue;
        }
        if inside {
            body.push_str(line);
            body.push('\n');
        }
    }
    body
}

/// `name -> code` from `vectors.json`.
fn expected_code(dir: &std::path::Path) -> BTreeMap<String, Vec<Insn>> {
    let json = std::fs::read_to_string(dir.join("vectors.json")).expect("read vectors.json");
    let tests: Vec<serde_json::Value> = serde_json::from_str(&json).expect("parse vectors.json");
    tests
        .iter()
        .map(|t| {
            let name = t["name"].as_str().expect("vector has a name").to_string();
            let hex = t["code"].as_str().expect("vector has code");
            let bytes: Vec<u8> = (0..hex.len())
                .step_by(2)
                .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).expect("code is hex"))
                .collect();
            (name, decode_all(&bytes).expect("code decodes"))
        })
        .collect()
}

#[test]
fn assembles_every_conformance_file() {
    let dir = conformance_dir();
    let expected = expected_code(&dir);
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir.join("data"))
        .expect("read conformance data dir")
        .map(|e| e.expect("dir entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "data"))
        .collect();
    files.sort();
    assert_eq!(
        files.len(),
        expected.len(),
        "data files and vectors.json disagree"
    );

    let mut failures = Vec::new();
    for path in &files {
        let name = path
            .file_name()
            .expect("file name")
            .to_string_lossy()
            .to_string();
        let text = std::fs::read_to_string(path).expect("read .data file");
        let Some(want) = expected.get(&name) else {
            failures.push(format!("{name}: not in vectors.json"));
            continue;
        };
        let got = match assemble(&asm_section(&text)) {
            Ok(got) => got,
            Err(e) => {
                failures.push(format!("{name}: {e}"));
                continue;
            }
        };
        if &got != want {
            let first = got.iter().zip(want).position(|(a, b)| a != b);
            failures.push(format!(
                "{name}: {} slots vs {} expected, first difference at {first:?}",
                got.len(),
                want.len()
            ));
            continue;
        }
        let text = disassemble(&got);
        match assemble(&text) {
            Ok(again) if again == got => {}
            Ok(_) => failures.push(format!(
                "{name}: disassembly reassembles differently:\n{text}"
            )),
            Err(e) => failures.push(format!(
                "{name}: disassembly does not assemble: {e}\n{text}"
            )),
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} conformance files failed:\n{}",
        failures.len(),
        files.len(),
        failures.join("\n")
    );
}

proptest::proptest! {
    /// Any slots at all, valid or not, disassemble to text that reassembles to them.
    #[test]
    fn any_slots_round_trip(raw in proptest::collection::vec(proptest::prelude::any::<u64>(), 1..40)) {
        let slots: Vec<Insn> = raw.iter().map(|v| Insn::decode(v.to_le_bytes())).collect();
        let text = disassemble(&slots);
        proptest::prop_assert_eq!(assemble(&text).ok(), Some(slots), "{}", text);
    }
}
