//! Generated tables survive the trip to the device and to Parquet unchanged: `put_dir`
//! copies every file byte for byte, and DuckDB over the Parquet copy agrees with the
//! columns read back.

use csx_data::columnar::LocalTable;
use csx_host::Device;

use crate::oracle::duckdb;

#[test]
fn a_generated_dataset_round_trips_through_the_device_and_parquet() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("tpch");
    let pq = tmp.path().join("pq");
    csx_data::tpch::generate(&data, 0.002, 5, &mut |_, _, _| {}).unwrap();
    csx_data::parquet::write_parquet(&data, &pq).unwrap();

    let dev = Device::init(&tmp.path().join("dev"), Default::default()).unwrap();
    let summary = csx_data::put::put_dir(&dev, &data, "/tpch", &mut |_, _| {}).unwrap();
    assert_eq!(summary.dirs, 2);
    let li = LocalTable::open(&data.join("lineitem")).unwrap();
    for c in &li.schema.columns {
        let local = std::fs::read(data.join("lineitem").join(c.file_name())).unwrap();
        let path = format!("/tpch/lineitem/{}", c.file_name());
        let remote = dev.read_file(&path, 0, local.len() as u64).unwrap();
        assert_eq!(local, remote, "{path}");
    }
    // A second put over the same directory replaces the files.
    csx_data::put::put_dir(&dev, &data, "/tpch", &mut |_, _| {}).unwrap();
    dev.close().unwrap();

    let ext = li.read("l_extendedprice").unwrap();
    let sum: i64 = (0..ext.len()).map(|i| ext.get_i64(i)).sum();
    let rows = duckdb(
        &pq,
        "SELECT count(*), sum(l_extendedprice), min(l_shipdate) FROM lineitem",
    );
    assert_eq!(rows[0][0], serde_json::json!(li.schema.rows));
    let want = format!("{}.{:02}", sum / 100, sum % 100);
    assert_eq!(rows[0][1], serde_json::json!(want));
    let ship = li.read("l_shipdate").unwrap();
    let min = (0..ship.len()).map(|i| ship.get_i64(i)).min().unwrap();
    assert_eq!(
        rows[0][2],
        serde_json::json!(csx_data::calendar::iso(min as i32))
    );
}

#[test]
fn put_r_refuses_a_file_and_a_relative_device_path() {
    let tmp = tempfile::tempdir().unwrap();
    let dev = Device::init(&tmp.path().join("dev"), Default::default()).unwrap();
    let f = tmp.path().join("f");
    std::fs::write(&f, b"x").unwrap();
    let e = csx_data::put::put_dir(&dev, &f, "/x", &mut |_, _| {}).unwrap_err();
    assert!(e.to_string().contains("not a directory"), "{e}");
    let e = csx_data::put::put_dir(&dev, tmp.path(), "x", &mut |_, _| {}).unwrap_err();
    assert!(e.to_string().contains("must be absolute"), "{e}");
    dev.close().unwrap();
}

/// A transport that records the kind of every command it passes on.
#[derive(Debug)]
struct Recording {
    inner: Box<dyn csx_host::transport::Transport>,
    ops: std::sync::Arc<std::sync::Mutex<Vec<&'static str>>>,
}

impl csx_host::transport::Transport for Recording {
    fn name(&self) -> &'static str {
        self.inner.name()
    }
    fn queue_depth(&self) -> u32 {
        self.inner.queue_depth()
    }
    fn submit(&self, cmd: csx_host::proto::Command) -> Result<(), csx_host::TransportError> {
        self.ops.lock().unwrap().push(cmd.op.name());
        self.inner.submit(cmd)
    }
    fn try_reap(&self) -> Result<Option<csx_host::proto::Completion>, csx_host::TransportError> {
        self.inner.try_reap()
    }
    fn reap(
        &self,
        timeout: Option<std::time::Duration>,
    ) -> Result<Option<csx_host::proto::Completion>, csx_host::TransportError> {
        self.inner.reap(timeout)
    }
    fn close(self: Box<Self>) -> Result<(), csx_host::TransportError> {
        self.inner.close()
    }
}

#[test]
fn a_directory_put_flushes_once_after_its_last_file() {
    use csx_host::transport::inproc::{embedded::Embedded, InprocOptions, InprocTransport};
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("src");
    std::fs::create_dir_all(src.join("sub")).unwrap();
    for (name, len) in [("a", 10usize), ("b", 0), ("sub/c", 3 << 20)] {
        std::fs::write(src.join(name), vec![7u8; len]).unwrap();
    }
    let dir = tmp.path().join("dev");
    let embedded = Embedded::init(&dir, Default::default()).unwrap();
    let inner = InprocTransport::new(embedded, InprocOptions::default()).unwrap();
    let ops = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let transport = Recording {
        inner: Box::new(inner),
        ops: ops.clone(),
    };
    let dev = Device::with_client(
        csx_host::Client::new(Box::new(transport)),
        csx_host::DeviceUri::Embedded(dir),
    );
    let summary = csx_data::put::put_dir(&dev, &src, "/t", &mut |_, _| {}).unwrap();
    assert_eq!(summary.files, 3);
    let ops = ops.lock().unwrap().clone();
    let flushes = ops.iter().filter(|o| **o == "flush").count();
    let renames = ops.iter().filter(|o| **o == "file-rename").count();
    assert_eq!(renames, 3, "each file replaced by rename: {ops:?}");
    assert_eq!(flushes, 1, "one flush for the whole tree: {ops:?}");
    assert_eq!(ops.last(), Some(&"flush"), "the flush comes last: {ops:?}");
    assert_eq!(dev.read_file("/t/sub/c", 0, 8).unwrap(), vec![7u8; 8]);
    dev.close().unwrap();
}
