//! The leftover checks of run_e2e.rs and faults_e2e.rs, shown able to
//! fail without booting a guest: a socket that fell back to the temporary
//! directory is found, and a folder that is not there is an error.

mod leftovers;

use std::os::unix::net::UnixListener;

use lazyinit_core::RunFolder;

#[test]
fn a_socket_in_the_temporary_directory_is_found() {
    let base = tempfile::tempdir().unwrap();
    // A results folder deep enough that a cell's socket path exceeds the
    // 107 bytes of sun_path: the socket goes to the temporary directory.
    let out = base.path().join("r".repeat(60)).join("s".repeat(60));
    // Through the run's writer, as QEMU gets it: the folder it falls back
    // to is made private.
    let run = lazyinit_core::RunWriter::claim(&RunFolder::new(&out)).unwrap();
    let cell = run.cell("x86_64-hz250-fix-64GiB-r1");
    cell.create().unwrap();
    let sock = cell.qmp_sock().unwrap();
    assert!(
        !sock.starts_with(&out),
        "{} is in the folder",
        sock.display()
    );
    let _l = UnixListener::bind(&sock).unwrap();
    let found = leftovers::sockets(&out);
    std::fs::remove_file(&sock).unwrap();
    assert_eq!(found, vec![sock]);
    // In the folder, by file type, whatever the name.
    let short = base.path().join("o");
    let c = RunFolder::new(&short).cell("c");
    std::fs::create_dir_all(c.path()).unwrap();
    let _k = UnixListener::bind(c.kvm_probe_qmp().shown()).unwrap();
    assert_eq!(leftovers::sockets(&short), vec![c.kvm_probe_qmp().shown()]);
}

#[test]
#[should_panic(expected = "cannot list")]
fn a_folder_that_is_not_there_is_not_nothing_left() {
    leftovers::files_under(std::path::Path::new("/nonexistent/volumes"));
}
