//! `fuzz TARGET`: the AFL++ entry point (persistent mode) for one target; run outside AFL it
//! reads one input from stdin, which is how a finding is replayed.

fn main() {
    let name = std::env::args().nth(1).unwrap_or_default();
    let Some(target) = sp_dust3r_fuzz::target(&name) else {
        eprintln!("usage: fuzz TARGET, one of:");
        for t in sp_dust3r_fuzz::TARGETS {
            eprintln!("  {:<22} {}", t.name, t.what);
        }
        std::process::exit(2);
    };
    // No panic hook: a decoder panic our code contains (Frame::decode catches the image
    // crate's) is not a crash; one that escapes still aborts, and AFL counts it.
    afl::fuzz_nohook!(|data: &[u8]| (target.run)(data));
}
