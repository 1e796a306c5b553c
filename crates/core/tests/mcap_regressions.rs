//! Every MCAP file the fuzzer once broke the reader with (`fuzz/regressions/mcap/`) is read
//! through the reader's whole surface with no allocation over 1 GiB: each file gives its good
//! messages and errors, never an abort. The fuzzer runs with a memory limit; an ordinary test
//! would not notice a reservation of gigabytes that is never touched, so this one caps them.

use std::alloc::{GlobalAlloc, Layout, System};
use std::path::Path;

use sp_dust3r_core::bag::McapFile;

/// The system allocator, refusing any single request over 1 GiB (a refusal aborts the test).
struct Capped;

const CAP: usize = 1 << 30;

// SAFETY: every call is forwarded to the system allocator unchanged, or refused with null.
unsafe impl GlobalAlloc for Capped {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if layout.size() > CAP {
            return std::ptr::null_mut();
        }
        // SAFETY: the caller's layout, as the trait requires of it.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from this allocator (so from System) with `layout`.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if new_size > CAP {
            return std::ptr::null_mut();
        }
        // SAFETY: as for dealloc; `new_size` is the caller's, as the trait requires of it.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Capped = Capped;

#[test]
fn every_file_the_fuzzer_found_reads_without_an_oversized_allocation() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/regressions/mcap");
    let mut files: Vec<_> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().path()).collect();
    files.sort();
    assert!(files.len() >= 11, "the regression files are there");
    for path in files {
        let bag = McapFile::open(&path).unwrap();
        let _ = bag.topics();
        let _ = bag.message_counts();
        let read = bag.messages().take(10_000).count();
        eprintln!("{}: {read} results", path.display());
    }
}
