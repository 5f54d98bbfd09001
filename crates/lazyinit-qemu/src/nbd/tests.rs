use super::*;

fn qemu_io(uri: &str, cmds: &[&str]) -> (Duration, String) {
    let mut c = std::process::Command::new("qemu-io");
    c.args(["-f", "raw"]);
    for x in cmds {
        c.args(["-c", x]);
    }
    c.arg(uri);
    let t = Instant::now();
    let out = c.output().expect("qemu-io (qemu-utils) runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    (
        t.elapsed(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

/// (policy, rt_priority, nice) of one thread of this process.
fn sched_of(tid: u32) -> (u32, u32, i32) {
    let stat = std::fs::read_to_string(format!("/proc/self/task/{tid}/stat")).unwrap();
    let f: Vec<&str> = stat[stat.rfind(')').unwrap() + 2..].split(' ').collect();
    // Fields 19 (nice), 40 (rt_priority), 41 (policy), from field 3 on.
    (
        f[38].parse().unwrap(),
        f[37].parse().unwrap(),
        f[16].parse().unwrap(),
    )
}

/// The server threads of a cell go where its guest goes: normal work at
/// its nice while it prepares, SCHED_FIFO above it while measured.
#[test]
fn a_cells_threads_follow_its_level() {
    assert!(
        crate::process::is_root(),
        "needs root (real-time priorities); CI runs the tests as root"
    );
    let dir = tempfile::tempdir().unwrap();
    let vol = dir.path().join("v.raw");
    File::create(&vol).unwrap().set_len(16 << 20).unwrap();
    let sock = dir.path().join("v.sock");
    let hold = Hold::new(Duration::from_micros(100));
    let _srv = NbdServer::start(&vol, &sock, hold.clone(), None).unwrap();
    // A client that stays connected for a while.
    let mut client = std::process::Command::new("qemu-io")
        .args(["-f", "raw", "-c", "sleep 5000"])
        .arg(format!("nbd+unix:///?socket={}", sock.display()))
        .stdout(std::process::Stdio::null())
        .spawn()
        .expect("qemu-io (qemu-utils) runs");
    let deadline = Instant::now() + Duration::from_secs(4);
    let tids = loop {
        let tids = hold.1.lock().unwrap().tids.clone();
        if tids.len() == 2 || Instant::now() > deadline {
            break tids;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(
        tids.len(),
        2,
        "the request and reply threads joined the cell"
    );
    for &tid in &tids {
        assert_eq!(
            sched_of(tid).0,
            0,
            "normal work until the cell says otherwise"
        );
    }
    hold.set_level(ThreadLevel::Realtime(3)).unwrap();
    for &tid in &tids {
        assert_eq!(sched_of(tid).0, 1, "SCHED_FIFO");
        assert_eq!(sched_of(tid).1, 3);
    }
    hold.set_level(ThreadLevel::Normal { nice: 7 }).unwrap();
    for &tid in &tids {
        assert_eq!(sched_of(tid), (0, 0, 7));
    }
    client.kill().unwrap();
    client.wait().unwrap();
}

/// QEMU's own NBD client against the server: data written comes back,
/// zeroed ranges read as zeros and become holes in the file, each zero
/// request waits the delay and plain writes do not.
#[test]
fn qemu_client_reads_writes_and_waits_on_zeroes() {
    let dir = tempfile::tempdir().unwrap();
    let vol = dir.path().join("v.raw");
    File::create(&vol).unwrap().set_len(64 << 20).unwrap();
    let sock = dir.path().join("v.sock");
    let srv = NbdServer::start(&vol, &sock, Hold::new(Duration::from_millis(200)), None).unwrap();
    let uri = format!("nbd+unix:///?socket={}", sock.display());

    let (writes, _) = qemu_io(
        &uri,
        &["write -P 0xab 0 4M", "write -P 0xcd 8M 4M", "flush"],
    );
    let (_, out) = qemu_io(&uri, &["read -P 0xab 0 4M", "read -P 0xcd 8M 4M"]);
    assert!(!out.contains("Pattern verification failed"), "{out}");
    let allocated = |p: &Path| {
        use std::os::unix::fs::MetadataExt;
        std::fs::metadata(p).unwrap().blocks() * 512
    };
    assert!(allocated(&vol) >= 8 << 20);

    let (zeroes, _) = qemu_io(&uri, &["write -z 0 2M", "write -z 2M 2M", "write -z 8M 4M"]);
    assert_eq!(srv.zero_requests(), 3);
    // A discard of the whole device in one request (mkfs does this) is
    // not bound by the 32 MiB payload limit.
    qemu_io(&uri, &["discard 0 64M"]);
    let (_, out) = qemu_io(&uri, &["read -P 0 0 4M", "read -P 0 8M 4M"]);
    assert!(!out.contains("Pattern verification failed"), "{out}");
    assert!(allocated(&vol) < 1 << 20, "zeroed ranges are holes");
    // Three zero requests in sequence: at least 3 x 200 ms (a lower
    // bound: a loaded host only adds). Only zero requests are held: the
    // counter saw exactly the three.
    assert!(zeroes >= Duration::from_millis(600), "{zeroes:?}");
    let _ = writes;

    drop(srv);
    assert!(!sock.exists());
}
