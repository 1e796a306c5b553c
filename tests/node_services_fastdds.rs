//! The node's services as a client on rmw_fastrtps (the ROS 2 default RMW) calls them: Fast DDS
//! itself (Debian's libfastrtps-dev, `tools/peers/fastdds_requester.cpp`) sends each request with
//! the reply reader's GUID in inline QoS and takes the reply whose related sample identity names
//! it, inside a private network namespace. A parameter service (`get_parameters`) and both
//! std_srvs/Trigger services (`~/save_map`, `~/reset`). tests/node_ros_graph.rs covers what the
//! services do, framed as rmw_cyclonedds frames them. And a client whose reply readers the node
//! discovers only after their requests came, on Fast DDS and in rmw_cyclonedds' framing, still
//! gets its replies (`crates/node/src/replies.rs`).

mod common;

use common::{peer_python, run_in_netns, NetnsRun};

/// A CDR (little-endian) payload under construction, encapsulation header first.
struct Cdr(Vec<u8>);

impl Cdr {
    fn new() -> Self {
        Self(vec![0, 1, 0, 0])
    }
    fn align(&mut self, n: usize) {
        while !(self.0.len() - 4).is_multiple_of(n) {
            self.0.push(0);
        }
    }
    fn u8(mut self, v: u8) -> Self {
        self.0.push(v);
        self
    }
    fn u32(mut self, v: u32) -> Self {
        self.align(4);
        self.0.extend(v.to_le_bytes());
        self
    }
    fn string(self, s: &str) -> Self {
        let mut c = self.u32(u32::try_from(s.len() + 1).unwrap());
        c.0.extend(s.as_bytes());
        c.0.push(0);
        c
    }
    /// As Fast DDS 2.10+ ends a payload: zeros to a multiple of 4, their count in the options.
    fn hex(mut self) -> String {
        let pad = (4 - self.0.len() % 4) % 4;
        self.0.resize(self.0.len() + pad, 0);
        self.0[3] = u8::try_from(pad).unwrap();
        self.0.iter().map(|b| format!("{b:02x}")).collect()
    }
}

/// Reads a CDR reply (encapsulation header included) field by field.
struct Reader {
    bytes: Vec<u8>,
    at: usize,
}

impl Reader {
    fn new(hex: &str) -> Self {
        let bytes: Vec<u8> =
            (0..hex.len() / 2).map(|i| u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).unwrap()).collect();
        assert!(bytes.len() >= 4 && bytes[1] == 1, "little-endian CDR expected: {hex}");
        Self { bytes, at: 4 }
    }
    fn align(&mut self, n: usize) {
        self.at += (n - (self.at - 4) % n) % n;
    }
    fn take(&mut self, n: usize) -> &[u8] {
        let s = &self.bytes[self.at..self.at + n];
        self.at += n;
        s
    }
    fn u8(&mut self) -> u8 {
        self.take(1)[0]
    }
    fn u32(&mut self) -> u32 {
        self.align(4);
        u32::from_le_bytes(self.take(4).try_into().unwrap())
    }
    fn skip(&mut self, align: usize, n: usize) {
        self.align(align);
        self.take(n);
    }
    fn string(&mut self) -> String {
        let n = self.u32() as usize;
        let s = self.take(n);
        assert_eq!(s.last(), Some(&0), "CDR strings end in NUL");
        String::from_utf8(s[..n - 1].to_vec()).unwrap()
    }
}

/// std_srvs/Trigger's reply: (success, message).
fn trigger_reply(hex: &str) -> (bool, String) {
    let mut r = Reader::new(hex);
    let success = r.u8() != 0;
    (success, r.string())
}

/// rcl_interfaces/GetParameters' reply with one value: (type, string_value).
fn one_string_value(hex: &str) -> (u8, String) {
    let mut r = Reader::new(hex);
    assert_eq!(r.u32(), 1, "one value");
    let kind = r.u8();
    r.skip(1, 1); // bool_value
    r.skip(8, 8); // integer_value
    r.skip(8, 8); // double_value
    (kind, r.string())
}

#[test]
fn services_answer_a_fast_dds_client() {
    fast_dds_client_calls(None);
}

/// A reply written before the node's reply writer matched the client's (volatile) reply reader
/// would be lost, and the client would wait for ever: this client's reply readers are announced a
/// second after their requests, and the node holds each reply until it has discovered the reader.
#[test]
fn a_fast_dds_client_whose_reply_readers_come_late_gets_its_replies() {
    fast_dds_client_calls(Some(1.0));
}

/// get_parameters, ~/save_map and ~/reset called by the Fast DDS requester, its reply readers
/// announced `late` seconds after the requests when given; every reply checked.
fn fast_dds_client_calls(late: Option<f64>) {
    let dir = tempfile::tempdir().unwrap();
    let root = env!("CARGO_MANIFEST_DIR");
    let built = std::process::Command::new(format!("{root}/tools/peers/build-fastdds-peer.sh"))
        .arg("requester")
        .output()
        .unwrap();
    assert!(built.status.success(), "building the Fast DDS requester: {}", String::from_utf8_lossy(&built.stderr));
    let requester = String::from_utf8(built.stdout).unwrap().trim().to_owned();
    let saved = dir.path().join("saved map.ply");
    // An empty request is a struct with one placeholder byte.
    let trigger = Cdr::new().u8(0).hex();
    let get = Cdr::new().u32(1).string("map_save_path").hex();
    let (trq, trp) = ("std_srvs::srv::dds_::Trigger_Request_", "std_srvs::srv::dds_::Trigger_Response_");
    let calls = [
        (
            "/cam/sp_dust3r/get_parameters",
            "rcl_interfaces::srv::dds_::GetParameters_Request_",
            "rcl_interfaces::srv::dds_::GetParameters_Response_",
            get.as_str(),
        ),
        ("/cam/sp_dust3r/save_map", trq, trp, trigger.as_str()),
        ("/cam/sp_dust3r/reset", trq, trp, trigger.as_str()),
    ]
    .map(|(s, q, p, h)| format!("{s} {q} {p} {h}"))
    .join(" ");
    let params = format!("-p 'map_save_path:={}'", saved.display());
    let late = late.map_or(String::new(), |s| format!("LATE_READER_S={s} "));
    let NetnsRun { stdout, report, log } =
        node_serving(dir.path(), "rmw_fastrtps_cpp", &params, &format!("{late}{requester} 60 {calls}"));
    let ctx = format!("{stdout}\nnode log:\n{log}");
    let replies = report["replies"].as_array().unwrap();
    let hex = |i: usize| replies[i]["hex"].as_str().unwrap();
    assert!(replies.len() == 3 && (0..3).all(|i| !hex(i).is_empty()), "a reply to every request: {ctx}");

    // ParameterType 4 is PARAMETER_STRING.
    assert_eq!(one_string_value(hex(0)), (4, saved.display().to_string()), "{ctx}");
    let (ok, message) = trigger_reply(hex(1));
    assert!(!ok && message.contains("no map yet"), "save_map before any pair: {message}");
    assert!(!saved.exists(), "nothing written");
    let (ok, message) = trigger_reply(hex(2));
    assert!(ok && message.contains("new keyframe chain"), "reset: {message}");
    assert!(log.contains("~/reset: a new keyframe chain"), "the reset is logged: {ctx}");
    assert!(!log.contains("replied anyway"), "every reply waited for its reader only: {ctx}");
}

/// The node (both models on tt-model server doubles, `params` added) under `rmw`'s service
/// framing, and `client` (shell) run against its services in a private network namespace; the
/// node must exit 0 on SIGINT.
fn node_serving(dir: &std::path::Path, rmw: &str, params: &str, client: &str) -> NetnsRun {
    let script = format!(
        "ip link set lo up || exit 90\n\
         export ROS_DOMAIN_ID=9\n\
         {doubles}\
         RMW_IMPLEMENTATION={rmw} HF_HUB_OFFLINE=1 ROS_LOCALHOST_ONLY=1 {node} node --ros-args -r __ns:=/cam \
           -p superpoint_backend:=tt-server -p superpoint_url:=http://127.0.0.1:$(cat {d}/sp_port) -p dust3r_backend:=tt-server \
           -p dust3r_url:=http://127.0.0.1:$(cat {d}/port) -p fallback:=none {params} > {d}/node.log 2>&1 &\n\
         pid=$!\n\
         {client}\n\
         rc=$?\n\
         kill -INT $pid; wait $pid; echo node_exit=$?\n\
         kill $spid $sppid\n\
         exit $rc\n",
        d = dir.display(),
        doubles = common::start_tt_doubles(dir),
        node = env!("CARGO_BIN_EXE_sp_dust3r"),
    );
    let run = run_in_netns(&script, &dir.join("node.log"));
    assert!(run.stdout.contains("node_exit=0"), "{}\nnode log:\n{}", run.stdout, run.log);
    run
}

/// The same in rmw_cyclonedds' framing, where the request names the client's participant rather
/// than its reply reader: a Trigger service and a parameter service.
#[test]
fn a_cyclone_client_whose_reply_readers_come_late_gets_its_replies() {
    let dir = tempfile::tempdir().unwrap();
    let peer = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tools/peers/cyclone_late_client.py");
    let client = format!("{} {} --late 1.0 --timeout 20", peer_python().display(), peer.display());
    let NetnsRun { stdout, report, log } =
        node_serving(dir.path(), "rmw_cyclonedds_cpp", "-p max_keypoints:=321", &client);
    let ctx = format!("{stdout}\nnode log:\n{log}");
    let reset = report["reset"].as_array().unwrap_or_else(|| panic!("no reply to ~/reset: {ctx}"));
    assert_eq!(reset[0], true, "{ctx}");
    assert!(reset[1].as_str().is_some_and(|m| m.contains("new keyframe chain")), "{ctx}");
    assert_eq!(report["get"], serde_json::json!([321]), "{ctx}");
    // Held, not lost: each came after its reader, well before the 5 s the node waits at most.
    for key in ["reset_s", "get_s"] {
        let s = report[key].as_f64().unwrap_or(f64::NAN);
        assert!((1.0..4.0).contains(&s), "{key} {s}: {ctx}");
    }
    assert!(!log.contains("replied anyway"), "{ctx}");
}
