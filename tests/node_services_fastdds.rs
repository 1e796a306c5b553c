//! The node's services as a client on rmw_fastrtps (the ROS 2 default RMW) calls them: Fast DDS
//! itself (Debian's libfastrtps-dev, `tools/peers/fastdds_requester.cpp`) sends each request with
//! the reply reader's GUID in inline QoS and takes the reply whose related sample identity names
//! it, inside a private network namespace. A parameter service (`get_parameters`) and both
//! std_srvs/Trigger services (`~/save_map`, `~/reset`). tests/node_ros_graph.rs covers what the
//! services do, framed as rmw_cyclonedds frames them.

mod common;

use common::{run_in_netns, NetnsRun};

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
    let script = format!(
        "ip link set lo up || exit 90\n\
         export ROS_DOMAIN_ID=9\n\
         {doubles}\
         RMW_IMPLEMENTATION=rmw_fastrtps_cpp HF_HUB_OFFLINE=1 ROS_LOCALHOST_ONLY=1 {node} node --ros-args -r __ns:=/cam \
           -p superpoint_backend:=tt-server -p superpoint_url:=http://127.0.0.1:$(cat {d}/sp_port) -p dust3r_backend:=tt-server \
           -p dust3r_url:=http://127.0.0.1:$(cat {d}/port) -p fallback:=none -p 'map_save_path:={saved}' > {d}/node.log 2>&1 &\n\
         pid=$!\n\
         {requester} 60 {calls}\n\
         rc=$?\n\
         kill -INT $pid; wait $pid; echo node_exit=$?\n\
         kill $spid $sppid\n\
         exit $rc\n",
        d = dir.path().display(),
        saved = saved.display(),
        doubles = common::start_tt_doubles(dir.path()),
        node = env!("CARGO_BIN_EXE_sp_dust3r"),
    );
    let NetnsRun { stdout, report, log } = run_in_netns(&script, &dir.path().join("node.log"));
    let ctx = format!("{stdout}\nnode log:\n{log}");
    assert!(stdout.contains("node_exit=0"), "{ctx}");
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
}
